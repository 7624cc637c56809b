"""Traces as text for the terminal (`hookchat trace`, `hookchat chat --trace`)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["render_trace"]


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _hook_line(hook: dict[str, Any]) -> str:
    where = f"{hook['file'].rsplit('/', 1)[-1]}:{hook['line']}"
    line = (
        f"{hook['plugin_id']}.{hook['function']} ({where}) prio {hook['priority']}"
        f"  {hook['duration_ms']:.2f} ms  {hook['outcome']}"
    )
    if hook.get("strategy"):
        line += f"  set {hook['strategy']['strategy']}" + (" (force)" if hook["strategy"]["force"] else "")
    if hook.get("error"):
        line += f": {_short(hook['error'])}"
    return line


def _item_lines(item: dict[str, Any]) -> list[str]:
    kind, at = item["type"], f"+{item['start_ms']:.1f} ms"
    if kind == "event":
        lines = [f"{at}  {item['event']}" + (f"  stopped by {item['stopped_by']}" if item["stopped_by"] else "")]
        for hook in item["hooks"]:
            lines.append(f"    {_hook_line(hook)}")
            lines.extend(f"        {change}" for change in hook["changes"] if not change.startswith("strategy "))
        return lines
    if kind == "model":
        model = f"{item['provider']}/{item['model']}" if item["model"] else item["provider"]
        head = (
            f"{at}  model {model}  {item['duration_ms']:.1f} ms"
            f"  tokens {item['prompt_tokens']}/{item['completion_tokens']}"
            + (f"  tools: {', '.join(item['tools'])}" if item["tools"] else "")
        )
        sections = ", ".join(f"{p['name']}({p['source']})" for p in item["system_prompt"])
        lines = [head, f"    system prompt: {sections}"]
        if item["error"]:
            lines.append(f"    error: {_short(item['error'])}")
        else:
            lines.append(f"    output: {_short(item['output'])}")
            lines.extend(f"    calls {c['name']}({_short(c['arguments'], 60)})" for c in item["tool_calls"])
        return lines
    if kind == "tool":
        status = "error" if item["is_error"] else "ok"
        return [
            f"{at}  tool {item['name']} ({item['plugin_id']})  {item['duration_ms']:.1f} ms  {status}",
            f"    args {_short(item['arguments'])} -> {_short(item['result'])}",
        ]
    if kind == "mcp":  # docs/mcp.md: one per call of an MCP server's tool, beside its `tool` item
        return [
            f"{at}  mcp {item['server']}/{item['tool']}  {item['duration_ms']:.1f} ms  {item['outcome']}"
            + (f": {_short(item['error'])}" if item.get("error") else "")
        ]
    if kind == "tag":
        result = f"error {item['error']}" if item["error"] else _short(item["elements"])
        return [f"{at}  tag <{item['name']}> ({item['plugin_id']})  {_short(item['value'], 40)!r} -> {result}"]
    if kind == "send":
        return [f"{at}  sent {'ok' if item['ok'] else 'FAILED'}: {_short(item['text'])}"]
    if kind == "history":
        return [f"{at}  history: stored {item['messages']} message(s)"]
    return [f"{at}  {kind}"]


def render_trace(data: dict[str, Any], *, logs: bool = True) -> str:
    """A trace (as `Trace.to_dict()` gives it) as indented lines: its messages, each dispatch with its hooks and
    what they changed, model and tool calls, tags, sends, history and (when `logs`) its log lines."""
    lines = [
        f"trace {data['id']}  {data['kind']}  {data['sid'] or ''}  {_short(data['name'], 60)!r}"
        f"  {data['outcome']}  {data['duration_ms']:.1f} ms" + (f"  ({data['error']})" if data["error"] else "")
    ]
    for message in data["messages"]:
        lines.append(f"  message {message['id']}  {_short(message['name'], 60)!r}  {message['outcome']}")
        for item in message["timeline"]:
            lines.extend(f"    {line}" for line in _item_lines(item))
    for item in data["timeline"]:
        lines.extend(f"  {line}" for line in _item_lines(item))
    if logs and data["logs"]:
        lines.append("  logs:")
        lines.extend(
            f"    +{log['t_ms']:.1f} ms {log['level']} {log['logger']}: {_short(log['message'], 160)}"
            for log in data["logs"]
        )
    if data.get("dropped"):
        lines.append(f"  ({data['dropped']} items not kept: the trace was too long)")
    return "\n".join(lines)
