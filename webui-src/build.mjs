// Builds the page into one self-contained file, ../llamacpy/server/webui/index.html: the bundled
// script, the styles (highlight.js themes, KaTeX with its woff2 fonts inlined) and the markup.
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "llamacpy", "server", "webui", "index.html");
const mod = (p) => join(here, "node_modules", p);
const read = (p) => readFileSync(p, "utf8");

const script = await build({
  entryPoints: [join(here, "src", "main.js")], bundle: true, minify: true, format: "iife",
  target: ["chrome105", "firefox110", "safari16"], write: false, legalComments: "none",
});
const js = script.outputFiles[0].text.replace(/<\/(script)/gi, "<\\/$1");

// KaTeX's @font-face rules keep only their woff2 source, inlined as a data URL
const katexCss = read(mod("katex/dist/katex.min.css")).replace(
  /src:url\(fonts\/([\w-]+)\.woff2\) format\("woff2"\)[^;}]*/g,
  (_, name) => `src:url(data:font/woff2;base64,${readFileSync(mod(`katex/dist/fonts/${name}.woff2`))
    .toString("base64")}) format("woff2")`);
const css = [
  read(mod("highlight.js/styles/github.min.css")),
  `@media (prefers-color-scheme: dark){${read(mod("highlight.js/styles/github-dark.min.css"))}}`,
  katexCss,
  read(join(here, "src", "style.css")),
].join("\n").replace(/<\/(style)/gi, "<\\/$1");

// what the page was built from, so a test can tell a stale build (tests/server/test_webui_serving.py)
const sources = ["build.mjs", "package-lock.json", ...readdirSync(join(here, "src")).map((f) => `src/${f}`)];
const hash = createHash("sha256");
for (const name of sources.sort()) hash.update(name + "\0").update(readFileSync(join(here, name))).update("\0");

const html = read(join(here, "src", "index.html"))
  .replace("<!doctype html>", () => `<!doctype html>\n<!-- built from webui-src, sha256 ${hash.digest("hex")} -->`)
  .replace("/*STYLE*/", () => css).replace("/*SCRIPT*/", () => js);
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, html);
console.log(`${out}: ${html.length} bytes, ${gzipSync(html, { level: 9 }).length} gzip-compressed`);
