"""Utilities with import paths fixed by seed 003 (`core.utils.tool_utils`)."""
