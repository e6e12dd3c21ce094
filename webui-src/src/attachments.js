// Files the user adds: images become data URLs (sent as image_url), text files are inlined.
const MAX_TEXT = 512 * 1024, MAX_IMAGE = 16 * 1024 * 1024;
const TEXT_NAMES = /\.(txt|md|markdown|json|csv|tsv|py|js|mjs|ts|c|cc|cpp|h|hpp|rs|go|java|sh|yaml|yml|toml|ini|log|xml|html|css|sql)$/i;

const dataUrl = (file) => new Promise((resolve, reject) => {
  const reader = new FileReader();
  reader.onload = () => resolve(reader.result);
  reader.onerror = () => reject(reader.error);
  reader.readAsDataURL(file);
});

/** {kind, name, url|text} for a file, or {error} saying why it cannot be attached. */
export async function readAttachment(file, vision) {
  if (file.type.startsWith("image/")) {
    if (!vision) return { error: `${file.name}: this model does not take images (no --mmproj)` };
    if (file.size > MAX_IMAGE) return { error: `${file.name}: images over 16 MB are not sent` };
    return { kind: "image", name: file.name || "pasted image", url: await dataUrl(file) };
  }
  if (file.size > MAX_TEXT) return { error: `${file.name}: text files over 512 KB are not inlined` };
  const text = await file.text();
  if (!file.type.startsWith("text/") && !TEXT_NAMES.test(file.name) && text.includes("\u0000"))
    return { error: `${file.name}: not a text file or an image` };
  return { kind: "text", name: file.name, text };
}
