"""KiraAI's import path for `desc_img` (`core.utils.common_utils`).

The function lives with the model clients in `core.provider.model_client`; this module only gives it the path
KiraAI plugins import it from. It is the one module of `core.utils` that reaches up into `core.provider`, and only
because that path is fixed by KiraAI.
"""

from core.provider.model_client import DEFAULT_VLM_PROMPTS, desc_img

__all__ = ["desc_img", "DEFAULT_VLM_PROMPTS"]
