"""KiraAI's `core.agent` import paths, for plugins written against KiraAI (`core.agent.message`)."""
