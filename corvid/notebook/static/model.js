// The editor's document: a list of blocks (paragraphs of prose and code cells) with an undo
// stack of snapshots, and the rules of the keys that reshape it. No DOM here: the rules are
// plain functions of a block's text and caret, tested on their own (tests/test_notebook_browser.py).

// A block: {id, type: "text" | "code", source, sep, html}. `sep` is the white space that follows
// it in the file (kept so that a save without an edit rewrites nothing), `html` its rendering
// by the server.

const UNDO_LIMIT = 200;
const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;

export function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return "p" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function newBlock(type, source = "") {
  return {id: newId(), type, source, sep: type === "code" ? "\n" : "\n\n", html: ""};
}

export class Doc {
  constructor(lead, blocks) {
    this.lead = lead;
    this.blocks = blocks;
    this.undoStack = [];
    this.redoStack = [];
  }

  snapshot() {
    return JSON.stringify({lead: this.lead, blocks: this.blocks});
  }

  // Remember the document as it is now (before a change), for undo.
  record(snapshot = this.snapshot()) {
    if (this.undoStack.at(-1) === snapshot) return;
    this.undoStack.push(snapshot);
    if (this.undoStack.length > UNDO_LIMIT) this.undoStack.shift();
    this.redoStack = [];
  }

  restore(snapshot) {
    const state = JSON.parse(snapshot);
    this.lead = state.lead;
    this.blocks = state.blocks;
  }

  undo() {
    if (!this.undoStack.length) return false;
    this.redoStack.push(this.snapshot());
    this.restore(this.undoStack.pop());
    return true;
  }

  redo() {
    if (!this.redoStack.length) return false;
    this.undoStack.push(this.snapshot());
    this.restore(this.redoStack.pop());
    return true;
  }

  index(id) {
    return this.blocks.findIndex((b) => b.id === id);
  }

  get(id) {
    return this.blocks[this.index(id)];
  }

  insert(index, block) {
    this.blocks.splice(index, 0, block);
    return block;
  }

  remove(ids) {
    const gone = new Set(ids);
    this.blocks = this.blocks.filter((b) => !gone.has(b.id));
  }

  // Replace the block `id` by `blocks` (the first keeps its place).
  replace(id, blocks) {
    this.blocks.splice(this.index(id), 1, ...blocks);
  }

  move(id, delta) {
    const i = this.index(id);
    const j = i + delta;
    if (i < 0 || j < 0 || j >= this.blocks.length) return false;
    [this.blocks[i], this.blocks[j]] = [this.blocks[j], this.blocks[i]];
    return true;
  }

  // Split the block `id` at `offset` of its source: the second half becomes a new block after it.
  split(id, offset) {
    const block = this.get(id);
    const second = newBlock(block.type, block.source.slice(offset).replace(/^\n+/, ""));
    second.sep = block.sep;
    block.source = block.source.slice(0, offset).replace(/\n+$/, "");
    block.sep = block.type === "code" ? "\n" : "\n\n";
    this.insert(this.index(id) + 1, second);
    return second;
  }
}

// Whether the line starting at `lineStart` is inside a fenced block opened earlier in `text`.
function insideFence(text, lineStart) {
  let fence = null;
  for (const line of text.slice(0, lineStart).split("\n")) {
    const m = FENCE.exec(line);
    if (fence !== null) {
      if (m && m[1][0] === fence[0] && m[1].length >= fence.length && !m[2].trim()) fence = null;
    } else if (m) {
      fence = m[1];
    }
  }
  return fence !== null;
}

// What Enter does in a paragraph whose text is `text`, with the selection [start, end):
//   {kind: "newline"}                  a line break in the paragraph (the browser's own);
//   {kind: "split", before, after}     on an empty line (or in an empty paragraph): a new
//                                      paragraph, `after` the text below the caret;
//   {kind: "code", before, after}      after a fence typed on its own line (``` or ```python):
//                                      a code cell between the text above and below.
export function enterAction(text, start, end) {
  if (start !== end) return {kind: "newline"};
  const lineStart = text.lastIndexOf("\n", start - 1) + 1;
  let lineEnd = text.indexOf("\n", start);
  if (lineEnd < 0) lineEnd = text.length;
  const line = text.slice(lineStart, lineEnd);
  if (insideFence(text, lineStart)) return {kind: "newline"};
  const before = text.slice(0, lineStart).replace(/\n+$/, "");
  const after = text.slice(lineEnd).replace(/^\n+/, "");
  if (/^ {0,3}(`{3,}|~{3,})\s*(python|py)?\s*$/.test(line) && start === lineEnd) {
    return {kind: "code", before, after};
  }
  if (!line.trim()) return {kind: "split", before, after};
  return {kind: "newline"};
}

// The indentation Enter gives the next line of code: the current line's, one level more after
// a line ending with ":".
export function indentAfter(text, caret) {
  const lineStart = text.lastIndexOf("\n", caret - 1) + 1;
  const line = text.slice(lineStart, caret);
  const indent = /^[ \t]*/.exec(line)[0];
  return /:\s*(#.*)?$/.test(line) ? indent + "    " : indent;
}

// Where in a block's source a click on its rendering lands: `shown` is the rendered text before
// the click; the source position just after the same last few characters, else the end.
export function sourceOffset(source, shown) {
  for (let n = Math.min(12, shown.length); n >= 3; n--) {
    const tail = shown.slice(-n);
    const at = source.indexOf(tail);
    if (at >= 0 && source.indexOf(tail, at + 1) < 0) return at + n;
  }
  return source.length;
}
