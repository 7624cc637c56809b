"""The shared subset of the plugin SDK: result types, errors and logging. Plugin authors import the full surface
from `plugin.sdk.plugin`; this package deliberately re-exports only what is safe everywhere.
"""

from core.services import Err, Ok, Result, SdkError, TransportError, get_plugin_logger, unwrap, unwrap_or

__all__ = ["Ok", "Err", "Result", "unwrap", "unwrap_or", "SdkError", "TransportError", "get_plugin_logger"]
