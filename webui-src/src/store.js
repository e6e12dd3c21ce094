// Conversations in the browser's IndexedDB (one record per conversation, its whole message tree)
// and settings in localStorage.
const DB = "llamacpy-webui", STORE = "conversations";

function open() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: "id" });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

const dbReady = open();

async function tx(mode, work) {
  const db = await dbReady;
  return new Promise((resolve, reject) => {
    const t = db.transaction(STORE, mode), store = t.objectStore(STORE);
    const req = work(store);
    t.oncomplete = () => resolve(req && req.result);
    t.onerror = () => reject(t.error);
  });
}

export const listConversations = async () =>
  (await tx("readonly", (s) => s.getAll())).sort((a, b) => b.updated - a.updated);
export const saveConversation = (conv) => tx("readwrite", (s) => s.put(structuredClone(conv)));
export const deleteConversation = (id) => tx("readwrite", (s) => s.delete(id));

export const SETTINGS_KEY = "llamacpy-webui-settings";
export const DEFAULT_SETTINGS = {
  system: "", temperature: "", top_k: "", top_p: "", min_p: "", max_tokens: "",
  repeat_penalty: "", seed: "", apiKey: "", custom: "",
};

export function loadSettings() {
  try {
    return { ...DEFAULT_SETTINGS, ...JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}") };
  } catch {
    return { ...DEFAULT_SETTINGS };
  }
}

export const saveSettings = (s) => localStorage.setItem(SETTINGS_KEY, JSON.stringify(s));
