"""`@llm_tool`: declare a plugin method as a tool the model can call (seed 000). The decorator and its rules are
`core.services.llm_tool`; `NekoPluginBase` registers decorated methods through `register_llm_tool`'s path.
"""

from core.services import LlmToolMeta, llm_tool

__all__ = ["llm_tool", "LlmToolMeta"]
