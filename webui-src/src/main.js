// llama-server's web chat page: conversations (IndexedDB), streamed markdown, branches, images,
// reasoning, settings, and the router's model choice.
import { HttpError, customFields, getJson, postJson, samplingFields, streamChat } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import * as store from "./store.js";
import * as tree from "./tree.js";
import { readAttachment } from "./attachments.js";

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children.filter((c) => c != null));
  return node;
};

const app = {
  settings: store.loadSettings(),
  props: null,        // /props of the server (of the chosen model in router mode)
  router: false,
  models: [],
  conversations: [],
  conv: null,
  pending: [],        // attachments for the next message
  controller: null,   // the AbortController of the reply streaming now
  streamingId: null,
};

// -- status ------------------------------------------------------------------------------------

function setStatus(text, kind = "") {
  $("status").textContent = text;
  $("status").dataset.kind = kind;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

const modelName = (p) => p.model_alias || (p.model_path || "").split(/[\\/]/).pop() || "model";

function askForKey(message) {
  openSettings(message || "This server needs an API key.");
  $("s-apiKey").focus();
}

/** Read /props (and /v1/models in router mode); retries while loading or unreachable. */
async function connect() {
  clearTimeout(app.retry);
  try {
    const props = await getJson("props", app.settings);
    app.router = props.role === "router";
    if (app.router) {
      await refreshModels();
      return;
    }
    app.props = props;
    const n = props.default_generation_settings?.n_ctx;
    setStatus(`${modelName(props)} · context ${n ?? "?"}`, "ok");
    notice("");
    capabilities();
  } catch (e) {
    connectionError(e);
    if (!(e instanceof HttpError && e.status === 401)) app.retry = setTimeout(connect, 2000);
  }
}

function connectionError(e) {
  if (e instanceof HttpError && e.status === 401) {
    setStatus("API key required", "error");
    askForKey();
  } else if (e instanceof HttpError && e.status === 503) {
    setStatus("Loading model…", "busy");
  } else if (e instanceof HttpError) {
    setStatus(`Error: ${e.message}`, "error");
  } else {
    setStatus("Server unreachable, retrying…", "error");
  }
}

/** Vision and thinking controls follow what the model can do. */
function capabilities() {
  const vision = !!app.props?.modalities?.vision;
  const attach = $("attach");
  attach.accept = vision ? "image/*,text/*,.md,.json,.csv,.py,.js,.ts,.c,.cpp,.h,.rs,.go,.java,.sh,.yaml,.yml,.toml,.log"
    : "text/*,.md,.json,.csv,.py,.js,.ts,.c,.cpp,.h,.rs,.go,.java,.sh,.yaml,.yml,.toml,.log";
  $("attach-label").title = vision ? "Attach images or text files"
    : "Images need a model with vision (llama-server --mmproj); text files are inlined";
  $("attach-label").dataset.vision = vision;
  const template = app.props?.chat_template || "";
  $("thinking-field").hidden = !template.includes("enable_thinking");
  $("thinking").checked = app.conv?.thinking ?? true;
}

// -- router mode: the model selector ------------------------------------------------------------

const modelLabel = (m) => `${m.id} (${m.status?.value ?? "loaded"}` +
  (m.status?.failed ? `, failed: exit ${m.status.exit_code}` : "") + ")";

async function refreshModels() {
  clearTimeout(app.modelTimer);
  try {
    app.models = (await getJson("v1/models", app.settings)).data;
  } catch (e) {
    connectionError(e);
    if (!(e instanceof HttpError && e.status === 401)) app.modelTimer = setTimeout(refreshModels, 2000);
    return;
  }
  const select = $("model"), keep = select.value;
  select.replaceChildren(...app.models.map((m) => new Option(modelLabel(m), m.id)));
  const loaded = app.models.find((m) => m.status?.value === "loaded");
  if (keep && app.models.some((m) => m.id === keep)) select.value = keep;
  else if (loaded) select.value = loaded.id;
  $("model-field").hidden = false;
  const chosen = app.models.find((m) => m.id === select.value);
  setStatus(`router · ${app.models.length} model(s)` + (chosen ? ` · ${modelLabel(chosen)}` : ""), "ok");
  if (chosen?.status?.value === "loaded" && app.propsFor !== chosen.id) {
    app.propsFor = chosen.id;
    app.props = await getJson(`props?model=${encodeURIComponent(chosen.id)}`, app.settings).catch(() => null);
    capabilities();
  }
  app.modelTimer = setTimeout(refreshModels, 2000);
}

async function chooseModel() {
  const m = app.models.find((x) => x.id === $("model").value);
  app.propsFor = null;
  if (m && !["loaded", "loading"].includes(m.status?.value)) {
    try {
      await postJson("models/load", { model: m.id }, app.settings);
    } catch (e) {
      setStatus(`Error: ${e.message}`, "error");
      return;
    }
  }
  refreshModels();
}

// -- conversations ------------------------------------------------------------------------------

async function refreshList() {
  app.conversations = await store.listConversations();
  const list = $("conversations");
  list.replaceChildren(...app.conversations.map((c) => {
    const open = el("button", { type: "button", className: "open", textContent: c.name,
                                title: c.name });
    open.setAttribute("aria-current", String(c.id === app.conv?.id));
    open.onclick = () => selectConversation(c.id);
    const rename = el("button", { type: "button", className: "icon", textContent: "✎",
                                  title: "Rename" });
    rename.setAttribute("aria-label", `Rename ${c.name}`);
    rename.onclick = () => renameConversation(c, li);
    const del = el("button", { type: "button", className: "icon", textContent: "×",
                               title: "Delete" });
    del.setAttribute("aria-label", `Delete ${c.name}`);
    del.onclick = () => removeConversation(c);
    const li = el("li", { className: c.id === app.conv?.id ? "active" : "" }, open, rename, del);
    return li;
  }));
}

function renameConversation(conv, li) {
  const input = el("input", { value: conv.name });
  input.setAttribute("aria-label", "Conversation name");
  let finished = false;
  const done = async (save) => {
    if (finished) return;  // Enter, then the blur of the removed input
    finished = true;
    if (save && input.value.trim()) {
      conv.name = input.value.trim();
      if (app.conv?.id === conv.id) app.conv.name = conv.name;
      await store.saveConversation(app.conv?.id === conv.id ? app.conv : conv);
    }
    refreshList();
  };
  input.onkeydown = (e) => {
    if (e.key === "Enter") { e.preventDefault(); done(true); }
    if (e.key === "Escape") { e.stopPropagation(); done(false); }
  };
  input.onblur = () => done(true);
  li.replaceChildren(input);
  input.focus();
  input.select();
}

async function removeConversation(conv) {
  if (!confirm(`Delete the conversation "${conv.name}"?`)) return;
  if (app.conv?.id === conv.id) stop();
  await store.deleteConversation(conv.id);
  if (app.conv?.id === conv.id) app.conv = null;
  await refreshList();
  renderMessages();
}

async function selectConversation(id) {
  if (app.controller) stop();
  app.conv = app.conversations.find((c) => c.id === id) || null;
  document.body.classList.remove("show-sidebar");
  await refreshList();
  capabilities();
  renderMessages();
}

function newChat() {
  if (app.controller) stop();
  app.conv = null;
  refreshList();
  capabilities();
  renderMessages();
  $("input").focus();
  document.body.classList.remove("show-sidebar");
}

async function save() {
  if (app.conv) await store.saveConversation(app.conv);
}

function exportConversations() {
  const blob = new Blob([JSON.stringify(app.conversations, null, 2)], { type: "application/json" });
  const a = el("a", { href: URL.createObjectURL(blob),
                      download: `llamacpy-conversations-${new Date().toISOString().slice(0, 10)}.json` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

function validConversation(c) {
  return c && typeof c.id === "string" && typeof c.name === "string" && c.nodes &&
    typeof c.nodes === "object" && c.nodes[c.root]?.role === "root" && c.nodes[c.current];
}

async function importConversations(file) {
  let data;
  try {
    data = JSON.parse(await file.text());
  } catch (e) {
    notice(`Import failed: ${file.name} is not JSON (${e.message})`);
    return;
  }
  const list = Array.isArray(data) ? data : [data];
  const bad = list.filter((c) => !validConversation(c)).length;
  for (const c of list.filter(validConversation)) await store.saveConversation(c);
  notice(bad ? `Imported ${list.length - bad} conversation(s); ${bad} were not conversations` : "");
  await refreshList();
}

// -- messages -----------------------------------------------------------------------------------

function branchNav(node) {
  const { index, count } = tree.siblingPosition(app.conv, node.id);
  if (count < 2) return null;
  const prev = el("button", { type: "button", className: "icon", textContent: "‹",
                              disabled: index === 1 || !!app.controller });
  prev.setAttribute("aria-label", "Previous version");
  prev.onclick = () => { tree.switchSibling(app.conv, node.id, -1); save(); renderMessages(); };
  const next = el("button", { type: "button", className: "icon", textContent: "›",
                              disabled: index === count || !!app.controller });
  next.setAttribute("aria-label", "Next version");
  next.onclick = () => { tree.switchSibling(app.conv, node.id, +1); save(); renderMessages(); };
  return el("span", { className: "branch" }, prev, el("span", { className: "position",
    textContent: `${index}/${count}` }), next);
}

function actionButton(label, text, onclick) {
  const b = el("button", { type: "button", className: "action", textContent: text, onclick,
                           disabled: !!app.controller });
  b.setAttribute("aria-label", label);
  b.title = label;
  return b;
}

function attachmentView(a) {
  if (a.kind === "image") return el("img", { src: a.url, alt: a.name, className: "thumb" });
  return el("span", { className: "file", textContent: `[${a.name}]` });
}

function userBubble(node) {
  const div = el("div", { className: "msg user" });
  div.dataset.id = node.id;
  div.append(el("div", { className: "text", textContent: node.content }));
  if (node.attachments?.length) div.append(el("div", { className: "files" }, ...node.attachments.map(attachmentView)));
  div.append(el("div", { className: "actions" }, branchNav(node),
                actionButton("Edit message", "Edit", () => editMessage(node, div))));
  return div;
}

function assistantBubble(node) {
  const div = el("div", { className: "msg assistant" });
  div.dataset.id = node.id;
  const thinking = el("details", { className: "reasoning" },
                      el("summary", { textContent: "Thinking" }), el("div", { className: "reasoning-text" }));
  const content = el("div", { className: "content markdown" });
  const stats = el("div", { className: "stats" });
  div.append(thinking, content, stats, el("div", { className: "actions" }, branchNav(node),
    actionButton("Copy message", "Copy", () => copyText(node.content)),
    actionButton("Regenerate", "Regenerate", () => regenerate(node))));
  fillAssistant(div, node);
  return div;
}

function fillAssistant(div, node) {
  const thinking = div.querySelector(".reasoning");
  thinking.hidden = !node.reasoning;
  thinking.querySelector(".reasoning-text").textContent = node.reasoning || "";
  const streaming = node.id === app.streamingId;
  if (streaming) thinking.open = !node.content;  // open while the thinking streams
  thinking.querySelector("summary").textContent = streaming && !node.content ? "Thinking…" : "Thinking";
  div.querySelector(".content").innerHTML = renderMarkdown(node.content || "");
  div.querySelector(".stats").textContent = statsText(node);
  div.classList.toggle("failed", !!node.error);
  if (node.error) div.querySelector(".content").append(el("div", { className: "error", textContent: node.error }));
}

function statsText(node) {
  const t = node.timings;
  const parts = [];
  if (t?.prompt_n != null && t.prompt_per_second)
    parts.push(`prompt ${t.prompt_n} tokens, ${t.prompt_per_second.toFixed(1)} tokens/s`);
  if (t?.predicted_n != null && t.predicted_per_second)
    parts.push(`generation ${t.predicted_n} tokens, ${t.predicted_per_second.toFixed(1)} tokens/s`);
  if (node.stopped) parts.push("stopped");
  return parts.join(" · ");
}

function renderMessages() {
  const box = $("messages");
  const nodes = app.conv ? tree.branch(app.conv) : [];
  if (!nodes.length) {
    box.replaceChildren(el("div", { className: "empty" },
      el("h2", { textContent: "Start a conversation" }),
      el("p", { textContent: "Enter sends, Shift+Enter adds a line, Escape stops the reply." })));
  } else {
    box.replaceChildren(...nodes.map((n) => (n.role === "user" ? userBubble(n) : assistantBubble(n))));
  }
  $("title").textContent = app.conv?.name || "New chat";
  const busy = !!app.controller;
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  document.body.dataset.busy = busy;  // for tests and styles: a reply is streaming
}

let renderQueued = false;
function renderStreaming(node) {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    const div = $("messages").querySelector(`[data-id="${node.id}"]`);
    if (!div) return;
    const box = $("messages");
    const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    fillAssistant(div, node);
    if (stick) box.scrollTop = box.scrollHeight;
  });
}

function editMessage(node, div) {
  const area = el("textarea", { value: node.content, className: "edit" });
  area.setAttribute("aria-label", "Edit message");
  const send = el("button", { type: "button", textContent: "Send edit", className: "primary" });
  const cancel = el("button", { type: "button", textContent: "Cancel" });
  cancel.onclick = renderMessages;
  send.onclick = () => {
    const text = area.value.trim();
    if (!text) return;
    // the edit is a sibling of the original, so both branches stay
    tree.addChild(app.conv, node.parent, { role: "user", content: text,
                                            attachments: node.attachments || [] });
    generate();
  };
  area.onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send.click(); }
  };
  div.replaceChildren(area, el("div", { className: "actions" }, cancel, send));
  area.focus();
}

function regenerate(node) {
  app.conv.current = node.parent;
  generate();
}

// -- sending ------------------------------------------------------------------------------------

function apiContent(node) {
  const files = (node.attachments || []).filter((a) => a.kind === "text");
  const images = (node.attachments || []).filter((a) => a.kind === "image");
  const text = [node.content, ...files.map((f) => `--- ${f.name} ---\n${f.text}`)].join("\n\n");
  if (!images.length) return text;
  return [...images.map((a) => ({ type: "image_url", image_url: { url: a.url } })),
          { type: "text", text }];
}

function requestBody() {
  const messages = [];
  if (app.settings.system.trim()) messages.push({ role: "system", content: app.settings.system.trim() });
  for (const n of tree.branch(app.conv))
    messages.push(n.role === "user" ? { role: "user", content: apiContent(n) }
                                    : { role: "assistant", content: n.content });
  const body = { messages, stream: true, timings_per_token: true, ...samplingFields(app.settings) };
  if (app.router && $("model").value) body.model = $("model").value;
  if (!$("thinking-field").hidden) body.chat_template_kwargs = { enable_thinking: !!app.conv.thinking };
  const custom = customFields(app.settings);
  if (custom.chat_template_kwargs && body.chat_template_kwargs)
    custom.chat_template_kwargs = { ...body.chat_template_kwargs, ...custom.chat_template_kwargs };
  return { ...body, ...custom };
}

function applyChunk(node, chunk) {
  for (const choice of chunk.choices || []) {
    const d = choice.delta || {};
    if (d.reasoning_content) node.reasoning = (node.reasoning || "") + d.reasoning_content;
    if (d.content) node.content += d.content;
  }
  if (chunk.timings) node.timings = chunk.timings;
  if (chunk.model) node.model = chunk.model;
}

/** Answer the branch's last (user) message: streams into a new assistant node. */
async function generate() {
  let body;
  try {
    body = requestBody();
  } catch (e) {
    notice(e.message);
    renderMessages();
    return;
  }
  const conv = app.conv;  // the user may switch chats before the reply ends
  const node = tree.addChild(conv, conv.current, { role: "assistant", content: "", reasoning: "" });
  app.controller = new AbortController();
  app.streamingId = node.id;
  notice("");
  await store.saveConversation(conv);
  renderMessages();
  refreshList();
  try {
    await streamChat(body, app.settings, app.controller.signal, (chunk) => {
      applyChunk(node, chunk);
      renderStreaming(node);
    });
  } catch (e) {
    if (e.name === "AbortError") node.stopped = true;
    else replyError(node, e);
  } finally {
    app.controller = null;
    app.streamingId = null;
    await store.saveConversation(conv);
    renderMessages();
    document.body.dataset.replies = +(document.body.dataset.replies || 0) + 1;
    $("input").focus();
  }
}

function replyError(node, e) {
  if (e instanceof HttpError && e.status === 401) {
    node.error = "The server needs an API key: enter it in Settings, then regenerate.";
    askForKey("The server answered 401: enter its API key.");
  } else if (e instanceof HttpError && e.status === 503) {
    node.error = "The server is loading the model; try again in a moment.";
    connect();
  } else if (e instanceof HttpError) {
    node.error = `Error ${e.status}: ${e.message}`;
  } else {
    node.error = `The server is unreachable (${e.message}).`;
    setStatus("Server unreachable, retrying…", "error");
    app.retry = setTimeout(connect, 2000);
  }
}

async function send() {
  const text = $("input").value.trim();
  if ((!text && !app.pending.length) || app.controller) return;
  if (!app.conv) {
    app.conv = tree.newConversation(text.slice(0, 48) || app.pending[0].name);
    app.conv.thinking = $("thinking").checked;
  }
  tree.addChild(app.conv, app.conv.current, { role: "user", content: text,
                                              attachments: app.pending });
  $("input").value = "";
  app.pending = [];
  renderPending();
  await generate();
}

function stop() {
  if (app.controller) app.controller.abort();  // closing the stream cancels the task on the server
}

function copyText(text) {
  if (navigator.clipboard?.writeText) return navigator.clipboard.writeText(text).catch(() => fallbackCopy(text));
  fallbackCopy(text);
}

function fallbackCopy(text) {
  const area = el("textarea", { value: text });
  document.body.append(area);
  area.select();
  document.execCommand("copy");
  area.remove();
}

// -- attachments --------------------------------------------------------------------------------

async function addFiles(files) {
  const vision = !!app.props?.modalities?.vision;
  for (const file of files) {
    const result = await readAttachment(file, vision);
    if (result.error) notice(result.error);
    else app.pending.push(result);
  }
  renderPending();
}

function renderPending() {
  $("attachments").replaceChildren(...app.pending.map((a, i) => {
    const remove = el("button", { type: "button", className: "icon", textContent: "×" });
    remove.setAttribute("aria-label", `Remove ${a.name}`);
    remove.onclick = () => { app.pending.splice(i, 1); renderPending(); };
    return el("span", { className: "pending" }, attachmentView(a), remove);
  }));
}

// -- settings -----------------------------------------------------------------------------------

const FIELDS = Object.keys(store.DEFAULT_SETTINGS);

function openSettings(message = "") {
  for (const key of FIELDS) $(`s-${key}`).value = app.settings[key];
  $("settings-notice").textContent = message;
  $("settings-notice").hidden = !message;
  if (!$("settings").open) $("settings").showModal();
}

function saveSettingsForm() {
  const next = {};
  for (const key of FIELDS) next[key] = $(`s-${key}`).value;
  const keyChanged = next.apiKey !== app.settings.apiKey;
  app.settings = next;
  try {
    samplingFields(next);
    customFields(next);
  } catch (e) {
    $("settings-notice").textContent = e.message;
    $("settings-notice").hidden = false;
    return false;
  }
  store.saveSettings(next);
  if (keyChanged || !app.props) connect();
  return true;
}

// -- wiring -------------------------------------------------------------------------------------

function wire() {
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $("input").addEventListener("paste", (e) => {
    const files = [...(e.clipboardData?.files || [])];
    if (files.length) { e.preventDefault(); addFiles(files); }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && app.controller && !$("settings").open) { e.preventDefault(); stop(); }
  });
  for (const target of [$("composer"), $("messages")]) {
    target.addEventListener("dragover", (e) => { e.preventDefault(); $("composer").classList.add("drop"); });
    target.addEventListener("dragleave", () => $("composer").classList.remove("drop"));
    target.addEventListener("drop", (e) => {
      e.preventDefault();
      $("composer").classList.remove("drop");
      addFiles([...(e.dataTransfer?.files || [])]);
    });
  }
  $("attach").addEventListener("change", (e) => { addFiles([...e.target.files]); e.target.value = ""; });
  $("send").addEventListener("click", (e) => { e.preventDefault(); send(); });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", newChat);
  $("settings-button").addEventListener("click", () => openSettings());
  $("settings-save").addEventListener("click", (e) => {
    e.preventDefault();
    if (saveSettingsForm()) $("settings").close();
  });
  $("settings-cancel").addEventListener("click", () => $("settings").close());
  $("thinking").addEventListener("change", () => {
    if (app.conv) { app.conv.thinking = $("thinking").checked; save(); }
  });
  $("model").addEventListener("change", chooseModel);
  $("export").addEventListener("click", exportConversations);
  $("import").addEventListener("change", (e) => {
    for (const f of e.target.files) importConversations(f);
    e.target.value = "";
  });
  $("menu").addEventListener("click", (e) => {
    e.stopPropagation();
    document.body.classList.toggle("show-sidebar");
  });
  document.querySelector("main").addEventListener("click", () => document.body.classList.remove("show-sidebar"));
  $("messages").addEventListener("click", (e) => {
    const button = e.target.closest(".copy");
    if (!button) return;
    copyText(button.closest(".code").querySelector("code").textContent);
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });
}

async function start() {
  wire();
  await refreshList();
  app.conv = app.conversations[0] || null;
  await refreshList();
  renderMessages();
  await connect();
}

start();
