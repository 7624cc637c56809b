"""KiraAI's module path of the persona model, `PersonaInfo` (`id`, `name`, `format`, `content`, `created_at`,
`is_active`)."""

from core.kira import PersonaInfo

__all__ = ["PersonaInfo"]
