"""Compatibility surface of another plugin SDK (seeds 000 and 002), so its plugins run on hookchat unchanged.

Import from `plugin.sdk.plugin`; everything there is a thin layer over `core.plugin` and `core.services`.
"""
