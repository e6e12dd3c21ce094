// A conversation is a tree of messages, as in llama.cpp's web UI: editing a user message or
// regenerating an answer adds a sibling, and `current` names the leaf of the branch shown.
export const uid = () => (crypto.randomUUID ? crypto.randomUUID()
  : Date.now().toString(36) + Math.random().toString(36).slice(2));

export function newConversation(name = "New chat") {
  const root = { id: uid(), parent: null, children: [], role: "root", content: "" };
  return { id: uid(), name, updated: Date.now(), root: root.id, current: root.id,
           nodes: { [root.id]: root }, thinking: true };
}

export function addChild(conv, parentId, fields) {
  const node = { id: uid(), parent: parentId, children: [], content: "", ...fields };
  conv.nodes[node.id] = node;
  conv.nodes[parentId].children.push(node.id);
  conv.current = node.id;
  conv.updated = Date.now();
  return node;
}

/** The messages from the root to `leafId`, root excluded. */
export function branch(conv, leafId = conv.current) {
  const out = [];
  for (let n = conv.nodes[leafId]; n && n.role !== "root"; n = conv.nodes[n.parent]) out.unshift(n);
  return out;
}

/** The deepest leaf under a node, following each node's last child (the newest branch). */
export function leafOf(conv, id) {
  let n = conv.nodes[id];
  while (n.children.length) n = conv.nodes[n.children[n.children.length - 1]];
  return n.id;
}

/** Show the sibling `step` places from `id` (-1: previous, +1: next). */
export function switchSibling(conv, id, step) {
  const siblings = conv.nodes[conv.nodes[id].parent].children;
  const i = siblings.indexOf(id) + step;
  if (i >= 0 && i < siblings.length) conv.current = leafOf(conv, siblings[i]);
}

export function siblingPosition(conv, id) {
  const siblings = conv.nodes[conv.nodes[id].parent].children;
  return { index: siblings.indexOf(id) + 1, count: siblings.length };
}
