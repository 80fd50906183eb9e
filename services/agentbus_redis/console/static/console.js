"use strict";
// The console page: hash routes over the JSON/SSE API. Everything received is shown with textContent,
// never as markup (model and producer text is untrusted).

const view = document.getElementById("view");
let me = { role: null, csrf: null };
let closers = [];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function json(value) { return JSON.stringify(value, null, 2); }
function when(ms) { return ms ? new Date(ms).toLocaleString() : "-"; }
function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message;
  box.hidden = !message;
}

async function api(path, options) {
  const init = Object.assign({ credentials: "same-origin", headers: {} }, options || {});
  if (init.body !== undefined) {
    init.method = init.method || "POST";
    init.headers["content-type"] = "application/json";
    init.headers["x-csrf-token"] = me.csrf || "";
    init.body = JSON.stringify(init.body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) { location.href = "/login"; throw new Error("not logged in"); }
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { detail: text }; }
  if (!response.ok) throw new Error((body && body.detail) || response.statusText);
  return body;
}

function stateBadge(state) { return el("span", { class: `state state-${state}`, "data-testid": "state", text: state.replace("_", " ") }); }
function operator() { return me.role === "operator"; }

// -- sessions ---------------------------------------------------------------------------------------

const FILTERS = ["all", "running", "waiting_model", "waiting_tool", "waiting_approval", "ended", "failed"];

async function sessionsPage(params) {
  const state = params.get("state") || "all";
  const q = params.get("q") || "";
  const cursor = params.get("cursor") || "";
  const select = el("select", { id: "state-filter", onchange: () => go("sessions", { state: select.value, q: search.value }) },
    ...FILTERS.map((f) => el("option", { value: f, selected: f === state, text: f.replace("_", " ") })));
  const search = el("input", { id: "search", type: "search", placeholder: "session id", value: q });
  const form = el("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); go("sessions", { state: select.value, q: search.value }); } },
    el("label", { text: "State" }), select, search, el("button", { type: "submit", text: "Search" }));
  const query = new URLSearchParams({ state, limit: "50" });
  if (q) query.set("q", q);
  if (cursor) query.set("cursor", cursor);
  const page = await api(`/api/sessions?${query}`);
  const rows = page.sessions.map((s) => el("tr", { "data-session": s.session_id },
    el("td", {}, el("a", { href: `#/session/${encodeURIComponent(s.session_id)}`, class: "mono", text: s.session_id })),
    el("td", {}, stateBadge(s.state)),
    el("td", { text: String(s.seq) }),
    el("td", { text: s.pending_tools.join(", ") }),
    el("td", { text: when(s.activity_ms) })));
  const table = el("table", { id: "sessions" },
    el("thead", {}, el("tr", {}, ...["session", "state", "events", "waiting tools", "last activity"].map((h) => el("th", { text: h })))),
    el("tbody", {}, ...rows));
  const next = page.next ? el("button", { id: "next-page", onclick: () => go("sessions", { state, q, cursor: page.next }), text: "Next page →" }) : null;
  view.replaceChildren(el("h1", { text: "Sessions" }), form, table,
    ...(rows.length ? [] : [el("p", { class: "muted", text: "No sessions." })]), el("p", {}, next));
}

// -- a session --------------------------------------------------------------------------------------

function rowNode(row) {
  const label = (text) => el("span", { class: "label", text });
  switch (row.kind) {
    case "user": return el("div", { class: "row row-user", "data-uuid": row.uuid }, label("user"), row.text);
    case "text": return el("div", { class: "row row-text", "data-uuid": row.uuid, "data-kind": "text" }, label("assistant"), row.text);
    case "thinking": return el("details", { class: "row row-thinking", "data-uuid": row.uuid }, el("summary", { text: "thinking" }), row.text);
    case "api_error": return el("div", { class: "row row-api_error", "data-uuid": row.uuid, "data-kind": "api_error" }, label("API error"), row.text);
    case "system": return el("div", { class: "row row-system", "data-uuid": row.uuid }, label(`system: ${row.subtype || ""}`), row.text);
    case "attachment": return el("div", { class: "row row-attachment", "data-uuid": row.uuid, text: `attachment: ${row.subtype || ""}` });
    case "tombstone": return el("div", { class: "row row-tombstone", text: `retracted reply ${row.retracts || ""}` });
    default: return el("div", { class: "row row-other", "data-uuid": row.uuid, text: row.text || row.kind });
  }
}

function toolCard(row) {
  return el("div", { class: "row row-tool_use", "data-uuid": row.uuid, "data-tool-use": row.id },
    el("span", { class: "label", text: `tool call ${row.name} · ${row.id}` }),
    el("pre", { class: "tool-input", text: json(row.input) }),
    el("div", { class: "tool-progress muted" }),
    el("div", { class: "tool-result" }));
}

function applyRows(box, rows) {
  for (const row of rows) {
    if (row.kind === "delta") {
      const key = `${row.request_id}:${row.index}:${row.delta_kind}`;
      let live = box.querySelector(`[data-live="${CSS.escape(key)}"]`);
      if (!live) {
        live = el("div", { class: "row row-live", "data-live": key, "data-live-kind": row.delta_kind },
          el("span", { class: "label", text: row.delta_kind === "thinking" ? "thinking (streaming)" : "assistant (streaming)" }), "");
        box.append(live);
      }
      live.append(row.text);
      continue;
    }
    if (row.kind === "text" || row.kind === "thinking") {
      const live = box.querySelector(`[data-live-kind="${row.kind}"]`);
      if (live) live.remove();  // the logged block replaces its streamed text
    }
    if (row.kind === "tool_use") { box.append(toolCard(row)); continue; }
    if (row.kind === "tool_result" || row.kind === "progress") {
      const card = box.querySelector(`[data-tool-use="${CSS.escape(row.tool_use_id || "")}"]`);
      if (card && row.kind === "progress") { card.querySelector(".tool-progress").textContent = row.text; continue; }
      if (card) {
        const result = card.querySelector(".tool-result");
        result.replaceChildren(el("span", { class: "label", text: row.is_error ? "result (error)" : "result" }),
          el("pre", { class: row.is_error ? "result-error" : "", text: row.text }));
        continue;
      }
      box.append(el("div", { class: "row", text: `${row.kind} ${row.tool_use_id}: ${row.text}` }));
      continue;
    }
    if (row.kind === "tombstone") {
      const target = box.querySelector(`[data-uuid="${CSS.escape(row.retracts || "")}"]`);
      if (target) { target.classList.add("retracted"); target.setAttribute("data-retracted", "true"); }
    }
    box.append(rowNode(row));
  }
}

function usageTable(usage) {
  const models = Object.entries(usage.models || {});
  if (!models.length) return el("p", { class: "muted", text: "No model calls yet." });
  return el("table", { id: "usage" },
    el("thead", {}, el("tr", {}, ...["model", "calls", "input", "output", "cache read", "cost (USD)"].map((h) => el("th", { text: h })))),
    el("tbody", {}, ...models.map(([model, u]) => el("tr", {},
      el("td", { text: model }), el("td", { text: String(u.requests) }), el("td", { text: String(u.input_tokens) }),
      el("td", { text: String(u.output_tokens) }), el("td", { text: String(u.cache_read_input_tokens) }),
      el("td", { text: u.cost_usd !== undefined ? Number(u.cost_usd).toFixed(6) : "-" })))));
}

function agentsList(agents) {
  if (!agents.length) return el("p", { class: "muted", text: "No sub-agents." });
  return el("table", { id: "agents" }, el("tbody", {}, ...agents.map((a) => el("tr", {},
    el("td", { class: "mono" }, "\u00a0\u00a0".repeat(a.depth - 1),
      el("a", { href: `#/session/${encodeURIComponent(a.session_id)}`, text: a.agent_id || a.session_id })),
    el("td", { text: `${a.agent_type || ""}${a.description ? ": " + a.description : ""}` }),
    el("td", { text: a.status || "-" }),
    el("td", { text: `$${Number(a.cost_usd || 0).toFixed(4)}` })))));
}

async function sessionPage(sessionId) {
  const id = encodeURIComponent(sessionId);
  const header = el("div", { class: "toolbar" });
  const usageBox = el("div", { id: "usage-box" });
  const agentsBox = el("div", { id: "agents-box" });
  const requestBox = el("pre", { id: "next-request" });
  const conversation = el("div", { class: "conversation", id: "conversation" });
  const prompt = el("textarea", { id: "prompt", rows: "3", placeholder: "Send a prompt" });
  const actions = operator() ? el("form", { class: "card", id: "prompt-form", onsubmit: async (e) => {
    e.preventDefault();
    try { await api(`/api/sessions/${id}/prompt`, { body: { text: prompt.value } }); prompt.value = ""; showError(""); }
    catch (err) { showError(err.message); }
  } }, prompt, el("div", { class: "actions" },
    el("button", { type: "submit", class: "primary", id: "send", text: "Send" }),
    el("button", { type: "button", class: "danger", id: "interrupt", text: "Interrupt the turn", onclick: async () => {
      try { await api(`/api/sessions/${id}/interrupt`, { body: {} }); showError(""); } catch (err) { showError(err.message); }
    } }))) : el("p", { class: "muted", text: "Read-only: sending and interrupting need the operator token." });
  const logBox = el("pre", { id: "raw-log" });
  const rawLog = el("details", { ontoggle: async () => { if (rawLog.open) logBox.textContent = json(await api(`/api/sessions/${id}/log`)); } },
    el("summary", { text: "Raw event log" }), logBox);
  view.replaceChildren(
    el("h1", {}, "Session ", el("span", { class: "mono", text: sessionId })),
    header,
    el("div", { class: "grid" },
      el("div", {}, conversation, actions),
      el("div", { class: "side" },
        el("div", { class: "card" }, el("h2", { text: "Usage and cost" }), usageBox),
        el("div", { class: "card" }, el("h2", { text: "Sub-agents" }), agentsBox),
        el("div", { class: "card" }, el("a", { href: `/api/sessions/${id}/transcript`, id: "transcript", text: "Download the transcript (JSONL)" })),
        el("details", { class: "card" }, el("summary", { text: "Next API request" }), requestBox),
        el("div", { class: "card" }, rawLog))));
  async function refresh() {
    try {
      const s = await api(`/api/sessions/${id}`);
      header.replaceChildren(stateBadge(s.state), el("span", { class: "muted", text: `${s.seq} events` }),
        ...(s.queued_prompts ? [el("span", { class: "muted", text: `${s.queued_prompts} queued prompt(s)` })] : []));
      usageBox.replaceChildren(usageTable(s.usage));
      agentsBox.replaceChildren(agentsList(s.agents || []));
      requestBox.textContent = s.next_request ? json(s.next_request) : "none yet";
    } catch (err) { header.replaceChildren(el("span", { class: "muted", text: err.message })); }
  }
  await refresh();
  const timer = setInterval(refresh, 2000);
  const source = new EventSource(`/api/sessions/${id}/events`);
  source.onmessage = (event) => applyRows(conversation, JSON.parse(event.data));
  closers.push(() => { clearInterval(timer); source.close(); });
}

// -- approvals --------------------------------------------------------------------------------------

function approvalCard(a) {
  const input = el("textarea", { class: "approval-input", rows: "4", text: json(a.input) });
  const message = el("input", { class: "approval-message", placeholder: "message (deny: the user's words; allow: feedback)" });
  const left = Math.max(0, Math.round((a.deadline_ms - Date.now()) / 1000));
  async function answer(decision) {
    const body = { decision, message: message.value || null };
    if (decision !== "deny") {
      try { body.input = JSON.parse(input.value); } catch (_) { showError("the input is not JSON"); return; }
    }
    try { await api(`/api/approvals/${encodeURIComponent(a.approval_id)}`, { body }); showError(""); loadApprovals(); }
    catch (err) { showError(err.message); }
  }
  return el("div", { class: "card approval", "data-approval": a.approval_id, "data-tool": a.tool_name },
    el("div", {}, el("strong", { text: a.tool_name }), " in session ",
      el("a", { href: `#/session/${encodeURIComponent(a.session_id)}`, class: "mono", text: a.session_id }),
      a.agent_id ? el("span", { class: "muted", text: ` · agent ${a.agent_id}` }) : null,
      el("span", { class: "muted", text: ` · ${left}s left` })),
    el("p", { text: a.request_message }),
    input, message,
    operator() ? el("div", { class: "actions" },
      el("button", { class: "primary", "data-action": "allow", text: "Allow", onclick: () => answer("allow") }),
      el("button", { "data-action": "always", text: "Allow always", onclick: () => answer("always") }),
      el("button", { class: "danger", "data-action": "deny", text: "Deny", onclick: () => answer("deny") })) : null);
}

async function loadApprovals() {
  const list = document.getElementById("approvals");
  const pending = await api("/api/approvals");
  document.getElementById("approval-count").textContent = pending.length ? String(pending.length) : "";
  if (!list) return;
  list.replaceChildren(...(pending.length ? pending.map(approvalCard) : [el("p", { class: "muted", text: "No tool call waits for approval." })]));
}

async function approvalsPage() {
  view.replaceChildren(el("h1", { text: "Approvals" }), el("div", { class: "cards", id: "approvals" }));
  await loadApprovals();
}

// -- dead letters -----------------------------------------------------------------------------------

async function deadLettersPage() {
  const letters = await api("/api/dead-letters");
  const rows = letters.map((d) => el("tr", { "data-dlq": d.dlq_id },
    el("td", { class: "mono", text: d.dlq_stream }),
    el("td", { text: d.reason }),
    el("td", {}, el("div", { class: "mono", text: `${d.stream} ${d.entry_id}` }),
      el("div", { class: "muted", text: `group ${d.group}, consumer ${d.consumer}, ${d.delivery_count} deliveries, ${when(d.at_ms)}` })),
    el("td", {}, el("div", { text: d.detail }), el("details", {}, el("summary", { text: "entry" }), el("pre", { text: json(d.fields) }))),
    el("td", {}, operator() ? el("button", { "data-action": "replay", text: "Replay", onclick: async () => {
      try { await api("/api/dead-letters/replay", { body: { dlq_stream: d.dlq_stream, dlq_id: d.dlq_id } }); showError(""); route(); }
      catch (err) { showError(err.message); }
    } }) : null)));
  view.replaceChildren(el("h1", { text: "Dead letters" }),
    letters.length ? el("table", { id: "dead-letters" },
      el("thead", {}, el("tr", {}, ...["dead-letter stream", "reason", "entry", "detail", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...rows)) : el("p", { class: "muted", id: "no-dead-letters", text: "No dead letters." }));
}

// -- the bus ----------------------------------------------------------------------------------------

async function busPage() {
  const bus = await api("/api/bus");
  const lanes = bus.lanes.map((lane) => el("div", { class: "card" },
    el("h2", { text: `${lane.lane}: ${lane.workers.length} worker(s)` }),
    el("div", { class: "mono", text: lane.workers.join("\n") || "none" }),
    el("table", {}, el("tbody", {}, ...lane.owners.map((owner, shard) => el("tr", {}, el("td", { text: `shard ${shard}` }), el("td", { class: "mono", text: owner || "unowned" })))))));
  const streams = el("table", { id: "streams" },
    el("thead", {}, el("tr", {}, ...["stream", "group", "length", "lag", "pending", "oldest pending"].map((h) => el("th", { text: h })))),
    el("tbody", {}, ...bus.streams.map((s) => el("tr", {},
      el("td", { class: "mono", text: s.stream }), el("td", { text: s.group || "-" }), el("td", { text: String(s.length) }),
      el("td", { text: s.lag === null ? "-" : String(s.lag) }), el("td", { text: String(s.pending) }),
      el("td", { text: s.oldest_pending_s === null ? "-" : `${s.oldest_pending_s.toFixed(1)}s` })))));
  const tools = el("table", { id: "tools" },
    el("thead", {}, el("tr", {}, ...["tool worker", "refreshed", "tools"].map((h) => el("th", { text: h })))),
    el("tbody", {}, ...bus.tools.workers.map((w) => el("tr", {},
      el("td", { class: "mono", text: w.worker }), el("td", { text: `${w.age_s}s ago` }), el("td", { text: w.tools.join(", ") })))));
  view.replaceChildren(el("h1", { text: "The bus" }), el("h2", { text: "Tool catalog" }), tools,
    el("h2", { text: "Ordered lanes and shard owners" }), el("div", { class: "cards" }, ...lanes),
    el("h2", { text: "Streams" }), streams);
}

// -- routing ----------------------------------------------------------------------------------------

function go(page, params) {
  const query = new URLSearchParams(Object.entries(params || {}).filter(([, v]) => v));
  location.hash = `#/${page}${query.toString() ? "?" + query : ""}`;
}

async function route() {
  for (const close of closers) close();
  closers = [];
  showError("");
  const hash = location.hash.replace(/^#\/?/, "") || "sessions";
  const [path, search] = hash.split("?");
  const params = new URLSearchParams(search || "");
  const [page, ...rest] = path.split("/");
  const section = page === "session" ? "sessions" : page;
  for (const link of document.querySelectorAll("[data-nav]")) link.classList.toggle("active", link.dataset.nav === section);
  try {
    if (page === "session") await sessionPage(decodeURIComponent(rest.join("/")));
    else if (page === "approvals") await approvalsPage();
    else if (page === "dead-letters") await deadLettersPage();
    else if (page === "bus") await busPage();
    else await sessionsPage(params);
  } catch (err) { showError(err.message); }
}

async function start() {
  me = await api("/api/me");
  document.getElementById("role").textContent = me.role === "operator" ? "operator" : "read-only";
  document.getElementById("logout-csrf").value = me.csrf || "";
  const approvals = new EventSource("/api/approvals/events");
  approvals.addEventListener("approvals", () => loadApprovals().catch((err) => showError(err.message)));
  window.addEventListener("hashchange", route);
  await route();
}

start();
