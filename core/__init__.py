"""hookchat: a hook-and-event framework for LLM chatbots whose every behaviour is a plugin."""

__version__ = "0.1.0"
