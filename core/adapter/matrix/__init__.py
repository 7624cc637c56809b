"""Matrix: a bot account on any homeserver (Synapse, Conduit, Dendrite...) through matrix-nio, an optional extra
(`pip install 'hookchat[matrix]'`); nio is imported when an adapter is built, so hookchat runs without it.

    [[adapters.instances]]
    type = "matrix"
    name = "matrix"
    options = { homeserver = "https://matrix.example.org", user_id = "@bot:example.org",
                access_token_env = "MATRIX_TOKEN" }

See docs/adapters.md ("Matrix": every option, what arrives and what goes out, setting it up on a homeserver).
"""

from core.adapter.matrix._adapter import CAPABILITIES, ENCRYPTION_REFUSAL, MatrixAdapter, MatrixError, MatrixStats
from core.adapter.matrix._content import mentions, plan_events, replied_to, text_of
from core.adapter.matrix._options import MatrixOptions

__all__ = [
    "MatrixAdapter",
    "MatrixOptions",
    "MatrixStats",
    "MatrixError",
    "CAPABILITIES",
    "ENCRYPTION_REFUSAL",
    "mentions",
    "plan_events",
    "replied_to",
    "text_of",
]
