// Model output -> safe HTML: marked (GFM), KaTeX for $...$ / $$...$$ / \(..\) / \[..\],
// highlight.js for code; raw HTML in the output is shown as text, then DOMPurify cleans it all.
import { Marked } from "marked";
import DOMPurify from "dompurify";
import katex from "katex";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import c from "highlight.js/lib/languages/c";
import cpp from "highlight.js/lib/languages/cpp";
import css from "highlight.js/lib/languages/css";
import go from "highlight.js/lib/languages/go";
import java from "highlight.js/lib/languages/java";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import markdown from "highlight.js/lib/languages/markdown";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import sql from "highlight.js/lib/languages/sql";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";

const LANGUAGES = { bash, c, cpp, css, go, java, javascript, json, markdown, python, rust, sql,
                    typescript, xml, yaml };
for (const [name, lang] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, lang);

const escapeHtml = (s) => s.replace(/[&<>"']/g, (ch) => (
  { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]);

function tex(source, displayMode) {
  return katex.renderToString(source, { displayMode, throwOnError: false, output: "htmlAndMathml" });
}

// $$..$$ and \[..\] blocks, $..$ and \(..\) inline; a "$" followed by a space or digit-only
// text like "$5 and $6" is left alone, as most chat UIs do
const mathBlock = {
  name: "mathBlock", level: "block",
  start: (src) => src.match(/\$\$|\\\[/)?.index,
  tokenizer(src) {
    const m = /^\$\$([\s\S]+?)\$\$/.exec(src) || /^\\\[([\s\S]+?)\\\]/.exec(src);
    if (m) return { type: "mathBlock", raw: m[0], text: m[1].trim() };
  },
  renderer: (token) => `<div class="math">${tex(token.text, true)}</div>`,
};
const mathInline = {
  name: "mathInline", level: "inline",
  start: (src) => src.match(/\$|\\\(/)?.index,
  tokenizer(src) {
    const m = /^\$(?![\s$])((?:\\.|[^\\\n$])+?)(?<!\s)\$(?![\d])/.exec(src) ||
              /^\\\(([\s\S]+?)\\\)/.exec(src);
    if (m) return { type: "mathInline", raw: m[0], text: m[1] };
  },
  renderer: (token) => tex(token.text, false),
};

const marked = new Marked({ gfm: true, breaks: false });
marked.use({
  extensions: [mathBlock, mathInline],
  renderer: {
    html: (token) => escapeHtml(token.text ?? token.raw),  // model output is never raw HTML
    code(token) {
      const lang = (token.lang || "").split(/\s/)[0].toLowerCase();
      const known = lang && hljs.getLanguage(lang);
      const body = known ? hljs.highlight(token.text, { language: lang }).value
                         : escapeHtml(token.text);
      return `<div class="code"><div class="code-head"><span>${escapeHtml(lang || "text")}` +
        `</span><button type="button" class="copy" aria-label="Copy code">Copy</button></div>` +
        `<pre><code class="hljs${known ? " language-" + lang : ""}">${body}</code></pre></div>`;
    },
    link(token) {
      const text = this.parser.parseInline(token.tokens);
      return `<a href="${escapeHtml(token.href)}" target="_blank" rel="noopener noreferrer">${text}</a>`;
    },
  },
});

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") node.setAttribute("rel", "noopener noreferrer");
});

/** Markdown text (possibly cut mid-stream) to sanitised HTML. */
export function renderMarkdown(text) {
  // an unclosed fence mid-stream still renders as code
  const fences = (text.match(/^\s*```/gm) || []).length;
  const source = fences % 2 ? text + "\n```" : text;
  const html = marked.parse(source);
  return DOMPurify.sanitize(html, { ADD_ATTR: ["target"], FORBID_TAGS: ["style", "form", "input"] });
}

export { escapeHtml };
