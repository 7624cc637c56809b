"""The framework's HTTP server and seed 000's remote tool registry: other processes register tools over HTTP and the
model calls them back over loopback. `ToolRegistryServer` serves it for an app; `ToolRegistryClient` is what an
out-of-process plugin uses to offer tools and keep them registered. See docs/tool-registry.md."""

from core.server._http import SIGNATURE_HEADER, EmbeddedServer, HTTPProblem, ListenError, callback_signature
from core.server._server import REGISTRY_DB_NAME, ToolRegistryServer, configured_token
from core.server._urls import LoopbackURLError, check_loopback_url, dispatch_url
from core.server.client import ToolRegistryClient
from core.server.registry import RegistrationError, RemoteToolRegistry, RemoteToolSpec, parse_registration

__all__ = [
    "EmbeddedServer",
    "HTTPProblem",
    "ListenError",
    "LoopbackURLError",
    "REGISTRY_DB_NAME",
    "RegistrationError",
    "RemoteToolRegistry",
    "RemoteToolSpec",
    "SIGNATURE_HEADER",
    "ToolRegistryClient",
    "ToolRegistryServer",
    "callback_signature",
    "check_loopback_url",
    "configured_token",
    "dispatch_url",
    "parse_registration",
]
