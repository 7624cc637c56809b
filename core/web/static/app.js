// The hookchat web console: one page, one view per hash (#chat, #traces, #trace/<id>, #hooks, #plugins, #logs,
// #mcp, #sessions, #page/<url>). Plain DOM code, no build step. Everything it shows comes from /api/* of the console.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
};

async function api(path, options = {}) {
  const response = await fetch(path, { headers: { "Content-Type": "application/json" }, ...options });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { error: text }; }
  if (!response.ok) throw new Error((data && data.error) || `${response.status} ${response.statusText}`);
  return data;
}

// -- routing ------------------------------------------------------------------------------------------------------

const views = {};
function route() {
  const hash = location.hash.slice(1) || "chat";
  const [name, ...rest] = hash.split("/");
  const arg = decodeURIComponent(rest.join("/"));
  document.querySelectorAll(".view").forEach((v) => v.classList.remove("active"));
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.view === name));
  const view = views[name] || views.chat;
  $(`#view-${views[name] ? name : "chat"}`).classList.add("active");
  view(arg).catch((err) => status(`error: ${err.message}`));
}
window.addEventListener("hashchange", route);
function status(text) { $("#status").textContent = text; }

// -- chat ---------------------------------------------------------------------------------------------------------

const chat = { socket: null, session: localStorage.getItem("hookchat.session") || "", turn: null, bubble: {}, linked: new Set() };

function renderElement(e) {
  switch (e.type) {
    case "text": return document.createTextNode(e.text);
    case "at": return el("span", { class: "at" }, "@" + (e.nickname || e.user_id));
    case "reply": return el("span", { class: "reply" }, "reply to " + e.message_id);
    case "image": case "sticker": return e.url ? el("img", { src: e.url, alt: e.name || e.type }) : el("span", {}, e.text);
    case "record": return e.url ? el("audio", { src: e.url, controls: true }) : el("span", {}, e.text);
    case "video": return e.url ? el("video", { src: e.url, controls: true, width: 320 }) : el("span", {}, e.text);
    case "file": return e.url ? el("a", { href: e.url, download: e.name || "file" }, e.name || "file") : el("span", {}, e.text);
    default: return el("span", { class: "muted" }, e.text || `[${e.type}]`);
  }
}

function addBubble(kind, content, meta) {
  const bubble = el("div", { class: `msg ${kind}` }, content);
  if (meta) bubble.append(meta);
  $("#chat-log").append(bubble);
  $("#chat-log").scrollTop = $("#chat-log").scrollHeight;
  return bubble;
}

function traceLink(id) {
  return id ? el("div", { class: "meta" }, el("a", { href: `#trace/${id}`, class: "trace-link" }, "trace")) : null;
}

function setTurn(running) {
  chat.turn = running;
  $("#chat-stop").disabled = !running;
  $("#chat-send").disabled = running;
  $("#chat-state").textContent = running ? "the bot is answering..." : "";
}

function dropDraft() {
  if (chat.draft) chat.draft.remove();
  chat.draft = null;
}

function connect(session) {
  if (chat.socket) chat.socket.close();
  $("#chat-log").replaceChildren();
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const query = session ? `?session=${encodeURIComponent(session)}` : "";
  const socket = new WebSocket(`${proto}://${location.host}/ws/chat${query}`);
  chat.socket = socket;
  socket.onmessage = (msg) => {
    const frame = JSON.parse(msg.data);
    if (frame.type === "ready") {
      chat.session = frame.session;
      localStorage.setItem("hookchat.session", frame.session);
      $("#chat-log").dataset.ready = "1";
      loadHistory(frame.sid);
      refreshSessions(frame.session);
    } else if (frame.type === "turn_started") {
      chat.linked = new Set();  // the traces this turn's bubbles link to
      setTurn(true);
    } else if (frame.type === "draft") {  // the message being written, replaced by the message once sent
      if (!chat.draft) chat.draft = addBubble("bot draft", "");
      chat.draft.textContent = frame.text;
      $("#chat-log").scrollTop = $("#chat-log").scrollHeight;
    } else if (frame.type === "message") {
      dropDraft();
      addBubble("bot", frame.elements.map(renderElement), traceLink(frame.trace_id));
      chat.linked.add(frame.trace_id);
    } else if (frame.type === "turn_ended") {
      dropDraft();
      setTurn(false);
      const note = frame.stopped ? "stopped" : frame.error ? frame.error : frame.sent ? null : "(nothing to send)";
      const bubble = note ? addBubble("note", note, traceLink(frame.trace_id)) : null;
      // the turn's trace, unless a message of it already links there
      if (!bubble && frame.trace_id && !chat.linked.has(frame.trace_id)) {
        addBubble("note", "", traceLink(frame.trace_id)).classList.add("turn-end");
      }
    } else if (frame.type === "error") {
      addBubble("note", "error: " + frame.error);
    }
  };
  socket.onclose = () => { if (chat.socket === socket) $("#chat-state").textContent = "disconnected"; };
}

async function loadHistory(sid) {
  try {
    const data = await api(`/api/sessions/${encodeURIComponent(sid)}`);
    for (const turn of data.turns) {
      for (const m of turn.messages) {
        if (m.role === "user") addBubble("user", m.content);
        else if (m.role === "assistant" && m.content) addBubble("bot", m.content).classList.add("history");
      }
    }
  } catch { /* a session without history */ }
}

async function refreshSessions(current) {
  const select = $("#chat-session");
  const sessions = (await api("/api/sessions")).filter((s) => s.sid.startsWith("web:dm:")).map((s) => s.sid.slice(7));
  if (current && !sessions.includes(current)) sessions.unshift(current);
  select.replaceChildren(...sessions.map((s) => el("option", { value: s, selected: s === current }, s)));
}

views.chat = async () => {
  if (!chat.socket || chat.socket.readyState > 1) connect(chat.session);
  $("#chat-input").focus();
};
$("#chat-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("#chat-input").value.trim();
  if (!text || !chat.socket || chat.socket.readyState !== 1 || chat.turn) return;
  addBubble("user", text);
  chat.socket.send(JSON.stringify({ type: "message", text }));
  $("#chat-input").value = "";
});
$("#chat-stop").addEventListener("click", () => chat.socket && chat.socket.send(JSON.stringify({ type: "stop" })));
$("#chat-new").addEventListener("click", () => connect(""));
$("#chat-session").addEventListener("change", (ev) => connect(ev.target.value));

// -- traces -------------------------------------------------------------------------------------------------------

views.traces = async () => {
  const all = $("#traces-all").checked;
  const traces = await api(`/api/traces?limit=100${all ? "" : "&kind=turn"}`);
  $("#traces-table tbody").replaceChildren(...traces.map((t) => el("tr", { class: "clickable", onclick: () => { location.hash = `trace/${t.id}`; } },
    el("td", {}, new Date(t.started_at).toLocaleTimeString()), el("td", {}, t.kind), el("td", {}, t.sid || ""),
    el("td", {}, t.name), el("td", { class: t.outcome === "error" ? "bad" : "" }, t.outcome), el("td", {}, t.duration_ms.toFixed(1)))));
};
$("#traces-refresh").addEventListener("click", () => views.traces());
$("#traces-all").addEventListener("change", () => views.traces());

function hookLine(h, total) {
  const width = Math.max(2, Math.round(300 * h.duration_ms / Math.max(total, 0.001)));
  const file = h.file.split("/").pop();
  const line = el("div", { class: `hook ${h.outcome}`, title: `${h.file}:${h.line}` },
    el("span", { class: "bar", style: `width:${width}px` }),
    `${h.plugin_id}.${h.function}  (${file}:${h.line})  prio ${h.priority}  ${h.duration_ms.toFixed(2)} ms  `,
    el("strong", { class: "outcome" }, h.outcome),
    h.strategy ? `  set ${h.strategy.strategy}${h.strategy.force ? " (force)" : ""}` : "",
    h.error ? `: ${h.error}` : "");
  const out = [line, ...h.changes.filter((c) => !c.startsWith("strategy ")).map((c) => el("div", { class: "change" }, c))];
  if (h.traceback) out.push(el("details", { class: "change" }, el("summary", {}, "traceback"), el("pre", {}, h.traceback)));
  return out;
}

function timelineItem(item, total) {
  const at = `+${item.start_ms.toFixed(1)} ms`;
  switch (item.type) {
    case "event":
      return el("div", { class: "item event", "data-event": item.event }, el("strong", {}, item.event), ` ${at}`,
        item.stopped_by ? el("span", { class: "bad" }, `  stopped by ${item.stopped_by}`) : "",
        item.hooks.map((h) => hookLine(h, total)));
    case "model":
      return el("div", { class: "item model" }, el("strong", {}, `model ${item.provider}${item.model ? "/" + item.model : ""}`),
        ` ${at}, ${item.duration_ms.toFixed(1)} ms, tokens ${item.prompt_tokens}/${item.completion_tokens}`,
        item.tools.length ? `, tools: ${item.tools.join(", ")}` : "",
        el("details", {}, el("summary", {}, "system prompt sections"),
          item.system_prompt.map((p) => el("div", {}, el("strong", {}, `${p.name} (${p.source})`), el("pre", {}, p.content)))),
        item.error ? el("div", { class: "bad" }, item.error) : el("pre", {}, item.output),
        item.tool_calls.map((c) => el("div", {}, `calls ${c.name}(${JSON.stringify(c.arguments)})`)));
    case "tool":
      return el("div", { class: "item tool" }, el("strong", {}, `tool ${item.name}`), ` (${item.plugin_id || "?"}) ${at}, ${item.duration_ms.toFixed(1)} ms `,
        el("span", { class: item.is_error ? "bad" : "ok" }, item.is_error ? "error" : "ok"),
        el("pre", {}, `${JSON.stringify(item.arguments)} -> ${item.result}`));
    case "tag":
      return el("div", { class: "item tag" }, el("strong", {}, `tag <${item.name}>`), ` (${item.plugin_id || "?"}) ${at}: `,
        JSON.stringify(item.value), " -> ", item.error ? el("span", { class: "bad" }, item.error) : item.elements.join(""));
    case "send":
      return el("div", { class: "item send" }, el("strong", {}, item.ok ? "sent" : "send failed"), ` ${at}: ${item.text}`);
    case "history":
      return el("div", { class: "item" }, el("strong", {}, "history"), ` ${at}: stored ${item.messages} message(s)`);
    default:
      return el("div", { class: "item" }, item.type, ` ${at}`);
  }
}

views.trace = async (id) => {
  const t = await api(`/api/traces/${encodeURIComponent(id)}`);
  if (t.outcome === "running") {  // a turn still in progress: show what it did so far, and look again soon
    setTimeout(() => { if (location.hash === `#trace/${id}`) views.trace(id); }, 400);
  }
  $("#trace-title").textContent = `${t.kind} ${t.id}`;
  $("#trace-summary").textContent = `${t.sid || ""}  "${t.name}"  ${t.outcome}  ${t.duration_ms.toFixed(1)} ms` + (t.error ? `  (${t.error})` : "");
  const total = t.duration_ms;
  const parts = [];
  for (const m of t.messages) {
    parts.push(el("div", { class: "item message" }, el("strong", {}, `message ${m.id}`), ` "${m.name}" ${m.outcome}`,
      m.timeline.map((item) => timelineItem(item, total))));
  }
  parts.push(...t.timeline.map((item) => timelineItem(item, total)));
  $("#trace-timeline").replaceChildren(...parts);
  $("#trace-logs").replaceChildren(...t.logs.map((l) => el("div", { class: l.level }, `+${l.t_ms.toFixed(1)} ms ${l.level} ${l.logger}: ${l.message}`)));
};

// -- hooks --------------------------------------------------------------------------------------------------------

views.hooks = async () => {
  const data = await api("/api/hooks");
  $("#hooks-disabled").textContent = data.disabled.length ? `not loaded (their hooks do not run): ${data.disabled.join(", ")}` : "";
  $("#hooks-list").replaceChildren(...data.events.map((e) => el("div", { class: "hook-event", "data-event": e.event },
    el("h3", {}, e.event),
    el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "priority"), el("th", {}, "plugin.function"), el("th", {}, "deadline"))),
      el("tbody", {}, e.hooks.map((h, i) => el("tr", {}, el("td", {}, i + 1), el("td", {}, h.priority),
        el("td", {}, `${h.plugin_id}.${h.function}`), el("td", {}, `${h.deadline} s`))))))));
};

// -- plugins ------------------------------------------------------------------------------------------------------

async function pluginAction(id, action) {
  $("#plugin-message").textContent = `${action} ${id}...`;
  let text;
  try {
    const s = await api(`/api/plugins/${encodeURIComponent(id)}/${action}`, { method: "POST" });
    text = `${id}: ${action} -> ${s.state}${s.reason ? ": " + s.reason : ""}`;
  } catch (err) {
    text = `${id}: ${err.message}`;
  }
  await views.plugins();
  $("#plugin-message").textContent = text;  // after the table shows the new state
}

views.plugins = async () => {
  const plugins = await api("/api/plugins");
  $("#plugins-table tbody").replaceChildren(...plugins.map((p) => el("tr", { "data-plugin": p.plugin_id },
    el("td", {}, el("strong", {}, p.plugin_id), el("div", { class: "muted" }, p.origin)),
    el("td", { class: `state ${p.state === "error" ? "bad" : p.state === "loaded" ? "ok" : ""}` }, p.state, p.reason ? el("div", { class: "reason" }, p.reason) : null,
      p.fault && p.state !== "error" ? el("div", { class: "reason" }, `faulty: ${p.fault}`) : null,
      p.reload ? el("div", { class: `reloaded ${p.reload.ok ? "ok" : "bad"}` }, `--reload ${new Date(p.reload.at * 1000).toLocaleTimeString()}: ` +
        (p.reload.ok ? "the new code is in effect" : (p.reload.reason === p.reason ? "failed" : `failed (${p.reload.reason})`) + "; retried on the next change")) : null),
    el("td", {}, p.version),
    el("td", { class: "muted" }, [p.hooks.length ? `${p.hooks.length} hooks` : "", p.tools.length ? `tools: ${p.tools.join(", ")}` : "", p.tags.length ? `tags: ${p.tags.join(", ")}` : ""].filter(Boolean).join("; ")),
    el("td", {},
      p.state === "loaded" ? el("button", { class: "disable", onclick: () => pluginAction(p.plugin_id, "disable") }, "Disable")
        : el("button", { class: "enable", onclick: () => pluginAction(p.plugin_id, "enable") }, "Enable"),
      " ", el("button", { class: "reload", onclick: () => pluginAction(p.plugin_id, "reload") }, "Reload"),
      p.has_config ? [" ", el("button", { class: "config", onclick: () => openConfig(p.plugin_id) }, "Settings")] : null))));
};

// One input per schema field: hookchat's JSON types and KiraAI's field types (switch, enum, list, section, ...).
function fieldInput(key, spec, value, path) {
  const kind = spec.type || "string";
  const name = [...path, key].join(".");
  const title = spec.name || key;
  const hint = spec.description || spec.hint || "";
  if (kind === "section") {
    const fields = spec.fields || {};
    return el("fieldset", {}, el("legend", {}, title),
      Object.entries(fields).map(([k, s]) => fieldInput(k, s, (value || {})[k], [...path, key])));
  }
  if (kind === "info") return el("p", { class: "hint" }, hint || title);
  let input;
  const options = spec.options || spec.enum;
  if (["boolean", "bool", "switch"].includes(kind)) {
    input = el("input", { type: "checkbox", checked: !!value });
  } else if (options && !["list", "multi_select", "array"].includes(kind)) {
    input = el("select", {}, options.map((o) => el("option", { value: JSON.stringify(o), selected: JSON.stringify(o) === JSON.stringify(value) }, String(o))));
  } else if (["integer", "int", "number", "float"].includes(kind)) {
    input = el("input", { type: "text", inputmode: "decimal", value: value ?? "" });
  } else if (["array", "list", "multi_select", "object", "json"].includes(kind)) {
    input = el("textarea", { rows: 2, cols: 40 });
    input.value = JSON.stringify(value ?? (kind === "object" ? {} : []));
  } else if (["textarea", "markdown", "yaml", "editor"].includes(kind)) {
    input = el("textarea", { rows: 3, cols: 40 });
    input.value = value ?? "";
  } else {
    input = el("input", { type: kind === "sensitive" ? "password" : "text", value: value ?? "" });
  }
  input.dataset.key = name;
  input.dataset.kind = kind;
  input.dataset.options = options ? "1" : "";
  input.name = name;
  return el("label", {}, el("span", {}, title + " "), input, hint ? el("span", { class: "hint" }, hint) : null);
}

function readValue(input) {
  const kind = input.dataset.kind;
  if (input.type === "checkbox") return input.checked;
  if (input.dataset.options) return JSON.parse(input.value);
  const text = input.value.trim();
  if (["integer", "int", "number", "float"].includes(kind)) {
    if (text === "") return null;
    const n = Number(text);
    return Number.isNaN(n) ? text : n;   // the server says what is wrong with a value that is not a number
  }
  if (["array", "list", "multi_select", "object", "json"].includes(kind)) {
    try { return JSON.parse(text || "null"); } catch { return text; }
  }
  return input.value;
}

const config = { plugin: null };
async function openConfig(id) {
  const data = await api(`/api/plugins/${encodeURIComponent(id)}/config`);
  config.plugin = id;
  $("#plugin-config").hidden = false;
  $("#plugin-config-title").textContent = `Settings of ${id}`;
  $("#plugin-config-message").textContent = "";
  $("#plugin-config-form").replaceChildren(...Object.entries(data.schema || {}).map(([k, s]) => fieldInput(k, s, data.cfg[k], [])));
}

$("#plugin-config-save").addEventListener("click", async () => {
  const values = {};
  for (const input of document.querySelectorAll("#plugin-config-form [data-key]")) {
    const keys = input.dataset.key.split(".");
    let target = values;
    for (const k of keys.slice(0, -1)) target = target[k] = target[k] || {};
    const value = readValue(input);
    if (value !== null) target[keys[keys.length - 1]] = value;
  }
  const message = $("#plugin-config-message");
  try {
    const result = await api(`/api/plugins/${encodeURIComponent(config.plugin)}/config`, { method: "PUT", body: JSON.stringify({ values }) });
    await views.plugins();
    message.className = "ok";
    message.textContent = `saved: ${config.plugin} is ${result.status.state} with the new settings`;
  } catch (err) {
    message.className = "bad";
    message.textContent = `not saved: ${err.message}`;
  }
});
$("#plugin-config-close").addEventListener("click", () => { $("#plugin-config").hidden = true; });

// -- logs ---------------------------------------------------------------------------------------------------------

const logs = { source: null };
function logLine(entry) {
  const time = new Date(entry.time * 1000).toLocaleTimeString();
  const who = entry.plugin_id ? ` [${entry.plugin_id}]` : "";
  const trace = entry.trace_id ? ` {${entry.trace_id}}` : "";
  return el("div", { class: `${entry.level} log-line`, "data-trace": entry.trace_id, "data-plugin": entry.plugin_id },
    `${time} ${entry.level} ${entry.logger}${who}${trace}: ${entry.message}`);
}
views.logs = async () => {
  if (logs.source) logs.source.close();
  const params = new URLSearchParams({ plugin: $("#logs-plugin").value.trim(), level: $("#logs-level").value, trace: $("#logs-trace").value.trim() });
  $("#logs-lines").replaceChildren();
  logs.source = new EventSource(`/api/logs/stream?${params}`);
  logs.source.onmessage = (msg) => {
    const box = $("#logs-lines");
    box.append(logLine(JSON.parse(msg.data)));
    while (box.childElementCount > 2000) box.firstChild.remove();
    box.scrollTop = box.scrollHeight;
  };
};
$("#logs-filter").addEventListener("submit", (ev) => { ev.preventDefault(); views.logs(); });

// -- sessions -----------------------------------------------------------------------------------------------------

views.sessions = async () => {
  const sessions = await api("/api/sessions");
  $("#session-history").replaceChildren();
  $("#sessions-table tbody").replaceChildren(...sessions.map((s) => el("tr", { "data-sid": s.sid },
    el("td", {}, el("a", { href: "#sessions", class: "open", onclick: (ev) => { ev.preventDefault(); showSession(s.sid); } }, s.sid)),
    el("td", {}, s.turns),
    el("td", {}, el("button", { class: "clear", onclick: async () => {
      if (!confirm(`Clear the history of ${s.sid} and the messages waiting for an answer?`)) return;
      await api(`/api/sessions/${encodeURIComponent(s.sid)}`, { method: "DELETE" });
      await views.sessions();
    } }, "Clear")))));
  const inbox = await api("/api/inbox");
  $("#poison-table tbody").replaceChildren(...inbox.poison.map((p) => el("tr", {},
    el("td", {}, new Date(p.received_at * 1000).toLocaleString()), el("td", {}, p.sid), el("td", {}, p.attempts),
    el("td", {}, p.text))));
};
async function showSession(sid) {
  const data = await api(`/api/sessions/${encodeURIComponent(sid)}`);
  $("#session-history").replaceChildren(el("h3", {}, sid), ...data.turns.map((t) => el("div", { class: "turn" },
    el("div", { class: "muted" }, `turn ${t.id}, ${new Date(t.created_at * 1000).toLocaleString()}`),
    t.messages.map((m) => el("div", { class: `msg ${m.role === "user" ? "user" : m.role === "assistant" ? "bot" : "note"}` },
      m.role === "tool" ? `tool result: ${m.content}` : m.content || (m.tool_calls || []).map((c) => `calls ${c.name}`).join(", "))))));
}

// -- MCP servers and skills --------------------------------------------------------------------------------------

async function mcpAction(name, action) {
  $("#mcp-message").textContent = `${action} ${name}...`;
  let text;
  try {
    const s = await api(`/api/mcp/${encodeURIComponent(name)}/${action}`, { method: "POST" });
    text = `${name}: ${action} -> ${s.state}${s.last_error ? ": " + s.last_error : ""}`;
  } catch (err) {
    text = `${name}: ${err.message}`;
  }
  await views.mcp();
  $("#mcp-message").textContent = text;
}

views.mcp = async () => {
  const data = await api("/api/mcp");
  $("#mcp-table tbody").replaceChildren(...data.servers.map((s) => el("tr", { "data-server": s.name },
    el("td", {}, el("strong", {}, s.name), el("div", { class: "muted" }, `${s.type} ${s.target}`), s.server ? el("div", { class: "muted" }, s.server) : null),
    el("td", { class: `state ${s.state === "ready" ? "ok" : s.state === "retrying" ? "bad" : ""}` }, s.state,
      s.last_error ? el("div", { class: "reason" }, `last error: ${s.last_error}`) : null),
    el("td", {}, s.tools.map((t) => el("div", { class: t.status === "refused" ? "reason" : "" },
      t.status === "refused" ? `${t.remote_name}: refused (${t.reason})` : t.name === t.remote_name ? t.name : `${t.remote_name} as ${t.name}`))),
    el("td", {},
      s.enabled ? el("button", { class: "disable", onclick: () => mcpAction(s.name, "disable") }, "Disable")
        : el("button", { class: "enable", onclick: () => mcpAction(s.name, "enable") }, "Enable"),
      " ", el("button", { class: "restart", onclick: () => mcpAction(s.name, "restart") }, "Restart")))));
  if (!data.servers.length) $("#mcp-table tbody").replaceChildren(el("tr", {}, el("td", { colspan: 4, class: "muted" }, "no MCP servers configured (docs/mcp.md)")));
  $("#skills-table tbody").replaceChildren(...data.skills.map((k) => el("tr", { "data-skill": k.name },
    el("td", {}, el("strong", {}, k.name), el("div", { class: "muted" }, k.folder)), el("td", {}, k.description),
    el("td", {}, !k.enabled ? "disabled" : k.scope ? Object.entries(k.scope).map(([mode, sids]) => `${mode}: ${sids.join(", ")}`).join("; ") : "every session"))));
  $("#skills-errors").replaceChildren(...data.skill_errors.map((e) => el("div", {}, e)));
};

// -- plugin pages -------------------------------------------------------------------------------------------------

// The address comes from the location hash, which any link can set: only a path of this console is framed, never
// `javascript:`, `data:` or another site (`//evil.example` is another site too).
function sameOriginPath(url) {
  if (typeof url !== "string" || !url.startsWith("/") || url.startsWith("//")) return null;
  let parsed;
  try { parsed = new URL(url, location.origin); } catch { return null; }
  return parsed.origin === location.origin ? parsed.pathname + parsed.search + parsed.hash : null;
}
views.page = async (url) => {
  const path = sameOriginPath(url);
  if (path === null) { $("#page-frame").removeAttribute("src"); throw new Error("a page link must be a path of this console"); }
  $("#page-frame").src = path;
};

async function start() {
  try {
    const overview = await api("/api/overview");
    status(`${overview.provider} · ${overview.plugins.loaded}/${overview.plugins.total} plugins loaded` +
      (overview.tracing ? " · tracing on" : "") + (overview.reload ? " · reload on" : ""));
    $("#plugin-menu").replaceChildren(...overview.pages.map((p) => el("a", { href: `#page/${encodeURIComponent(p.url)}`, class: "plugin-page" }, p.label)));
  } catch (err) {
    status(`error: ${err.message}`);
  }
  route();
}
start();
