"""KiraAI's module path for personas: `PersonaManager` (what `ctx.persona_mgr` is: `await get_persona()`,
`get_active_persona()`, `list_personas()`) and, in `core.persona.model`, the persona model `PersonaInfo`. hookchat
has one persona, the `persona` section the operator configured (docs/kira-compat.md)."""

from core.kira import PersonaInfo
from core.kira import PersonaManagerFacade as PersonaManager

__all__ = ["PersonaManager", "PersonaInfo"]
