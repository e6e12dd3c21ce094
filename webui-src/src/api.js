// The server's HTTP API as the page uses it: /props, /v1/models, /models/load and streamed
// /v1/chat/completions (OpenAI's SSE chunks plus llama.cpp's `timings`).
export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function headers(settings) {
  const h = { "Content-Type": "application/json" };
  if (settings.apiKey.trim()) h.Authorization = "Bearer " + settings.apiKey.trim();
  return h;
}

async function failure(r) {
  const body = await r.json().catch(() => null);
  return new HttpError(r.status, body?.error?.message || r.statusText || `HTTP ${r.status}`);
}

export async function getJson(path, settings) {
  const r = await fetch(path, { headers: headers(settings) });
  if (!r.ok) throw await failure(r);
  return r.json();
}

export async function postJson(path, body, settings) {
  const r = await fetch(path, { method: "POST", headers: headers(settings),
                                body: JSON.stringify(body) });
  if (!r.ok) throw await failure(r);
  return r.json();
}

const NUMBERS = { temperature: parseFloat, top_k: (v) => parseInt(v, 10), top_p: parseFloat,
                  min_p: parseFloat, max_tokens: (v) => parseInt(v, 10),
                  repeat_penalty: parseFloat, seed: (v) => parseInt(v, 10) };

/** The settings that are set, as request fields (an empty field keeps the server's default). */
export function samplingFields(settings) {
  const out = {};
  for (const [key, parse] of Object.entries(NUMBERS)) {
    const raw = String(settings[key] ?? "").trim();
    if (raw === "") continue;
    const value = parse(raw);
    if (Number.isNaN(value)) throw new Error(`Settings: ${key} is not a number: "${raw}"`);
    out[key] = value;
  }
  return out;
}

export function customFields(settings) {
  const raw = settings.custom.trim();
  if (!raw) return {};
  let value;
  try {
    value = JSON.parse(raw);
  } catch (e) {
    throw new Error("Settings: custom parameters are not valid JSON: " + e.message);
  }
  if (typeof value !== "object" || Array.isArray(value) || value === null)
    throw new Error("Settings: custom parameters must be a JSON object");
  return value;
}

/** POST a chat and call onChunk for each SSE chunk; resolves when the stream ends. */
export async function streamChat(body, settings, signal, onChunk) {
  const r = await fetch("v1/chat/completions", { method: "POST", headers: headers(settings),
                                                 body: JSON.stringify(body), signal });
  if (!r.ok) throw await failure(r);
  const reader = r.body.getReader(), decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      const data = event.split(/\r?\n/).filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trimStart()).join("\n");
      if (!data || data === "[DONE]") continue;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new HttpError(chunk.error.code || 500, chunk.error.message);
      onChunk(chunk);
    }
  }
}
