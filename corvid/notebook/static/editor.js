// The notebook editor's page: the document rendered as it reads, each block edited in place
// (a click turns a paragraph or a cell into its source), cells run in the server's kernel with
// their outputs polled as they stream, and saves through the server (corvid/notebook/editor.py).
//
// Modes, as in Jupyter: editing one block (a textarea), or commanding (a block selected, keys
// act on blocks). The document is a list of blocks (model.js); every change to its structure or
// a committed edit is recorded for undo, and the page is rebuilt from the list, so nothing that
// is not in the list can stay on the page.

import {call} from "./api.js";
import {Doc, enterAction, indentAfter, newBlock, sourceOffset} from "./model.js";

const AUTOSAVE = Number(document.querySelector('meta[name="corvid-autosave"]').content) || 0;
const docEl = document.getElementById("doc");

const state = {
  doc: new Doc("", []),
  cells: new Map(), // cell id -> {status, count, outputs (HTML)}
  cursor: null, // the current block's id
  selected: new Set(),
  editing: null, // {id, preEdit: the snapshot before the edit, source: the source when it began}
  caret: {start: 0, end: 0},
  version: 0,
  kernel: "starting",
  edits: 0, // changes made on the page ...
  savedEdits: 0, // ... of which this many are saved
  unsavedOutputs: false,
  conflict: false,
  pending: new Set(), // renders in flight
  saving: null,
  autosaveTimer: null,
  lastKey: null, // the first key of D,D / I,I / 0,0
};

// --- helpers -------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

function escapeHtml(text) {
  return text.replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})[c]);
}

function blockEl(id) {
  return docEl.querySelector(`.block[data-id="${CSS.escape(id)}"]`);
}

function neighbor(id, delta) {
  return state.doc.blocks[state.doc.index(id) + delta];
}

function showMessage(text, kind = "error") {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = kind;
  box.hidden = false;
  clearTimeout(showMessage.timer);
  showMessage.timer = setTimeout(() => { box.hidden = true; }, 8000);
}

function autosize(textarea) {
  textarea.style.height = "auto";
  textarea.style.height = `${textarea.scrollHeight + 2}px`;
}

function insertText(textarea, text) {
  textarea.focus();
  if (!document.execCommand("insertText", false, text)) { // keeps the textarea's own undo
    textarea.setRangeText(text, textarea.selectionStart, textarea.selectionEnd, "end");
    textarea.dispatchEvent(new Event("input"));
  }
}

// --- rendering -----------------------------------------------------------------------------

const CELL_TOOLS = [["run", "▶", "Run this cell (Shift+Enter)"]];
const BLOCK_TOOLS = [
  ["up", "↑", "Move up (Alt+↑)"], ["down", "↓", "Move down (Alt+↓)"],
  ["split", "Split", "Split at the cursor (Ctrl+Shift+-)"],
  ["add-code", "+ Code", "Add a code cell below (B)"], ["add-text", "+ Text", "Add a paragraph below"],
  ["delete", "Delete", "Delete (D, D)"],
];

function toolbar(block) {
  const tools = el("div", {class: "tools"});
  for (const [action, label, title] of [...(block.type === "code" ? CELL_TOOLS : []), ...BLOCK_TOOLS]) {
    if (action === "split" && state.editing?.id !== block.id) continue;
    tools.append(el("button", {"data-action": action, title, type: "button"}, label));
  }
  return tools;
}

function setHtml(node, html) {
  node.innerHTML = html;
  for (const a of node.querySelectorAll("a[href]")) {
    if (!a.getAttribute("href").startsWith("#")) {
      a.target = "_blank";
      a.rel = "noopener noreferrer";
    }
  }
}

function editorFor(block) {
  const textarea = el("textarea", {
    class: `editor ${block.type === "code" ? "code-editor" : "prose-editor"}`,
    spellcheck: block.type === "text" ? "true" : "false", rows: "1",
    placeholder: state.doc.blocks.length === 1 ? "An empty notebook: write here, or add a cell with + Code"
      : block.type === "text" ? "Write markdown…" : "Python code",
  });
  textarea.value = block.source;
  textarea.addEventListener("input", () => {
    block.source = textarea.value;
    autosize(textarea);
    changed();
  });
  textarea.addEventListener("keydown", (e) => editKey(e, block, textarea));
  return textarea;
}

function cellLabel(cell) {
  if (!cell) return "[ ]";
  if (cell.status === "running") return "[*]";
  if (cell.status === "queued") return "[…]";
  return cell.count ? `[${cell.count}]` : "[ ]";
}

function renderBlock(block) {
  const node = el("div", {class: `block ${block.type}`, "data-id": block.id});
  node.classList.toggle("cursor", block.id === state.cursor);
  node.classList.toggle("selected", state.selected.has(block.id) && state.selected.size > 1);
  const editing = state.editing?.id === block.id;
  node.classList.toggle("editing", editing);
  if (block.type === "text") {
    if (editing) {
      node.append(editorFor(block));
    } else {
      const prose = el("div", {class: "prose"});
      setHtml(prose, block.html || `<p>${escapeHtml(block.source)}</p>`);
      prose.classList.toggle("empty", !block.source.trim());
      node.append(prose);
    }
  } else {
    const cell = state.cells.get(block.id);
    node.append(el("div", {class: "gutter"}, el("span", {class: "count"}, cellLabel(cell))));
    if (editing) {
      node.append(editorFor(block));
    } else {
      const code = el("code", {class: "language-python"});
      code.innerHTML = block.html || escapeHtml(block.source);
      node.append(el("pre", {class: "code"}, code));
    }
    const outputs = el("div", {class: "outputs"});
    setHtml(outputs, cell?.outputs || "");
    outputs.dataset.html = cell?.outputs || "";
    node.append(outputs);
    if (cell) node.dataset.status = cell.status;
  }
  node.append(toolbar(block));
  return node;
}

function render() {
  const current = docEl.querySelector("textarea");
  if (current && state.editing && current.closest(".block").dataset.id === state.editing.id) {
    state.caret = {start: current.selectionStart, end: current.selectionEnd};
  }
  docEl.replaceChildren(...state.doc.blocks.map(renderBlock));
  const textarea = docEl.querySelector("textarea");
  if (textarea) {
    autosize(textarea);
    textarea.focus({preventScroll: true});
    textarea.setSelectionRange(state.caret.start, state.caret.end);
    textarea.closest(".block").scrollIntoView({block: "nearest"});
  }
  updateToolbar();
}

function updateCell(id) {
  const node = blockEl(id);
  const cell = state.cells.get(id);
  if (!node || !cell) return;
  node.dataset.status = cell.status;
  node.querySelector(".count").textContent = cellLabel(cell);
  const outputs = node.querySelector(".outputs");
  if (outputs.dataset.html !== cell.outputs) { // unchanged outputs are left alone: no image flickers
    setHtml(outputs, cell.outputs);
    outputs.dataset.html = cell.outputs;
  }
}

function updateToolbar() {
  document.getElementById("undo").disabled = !state.doc.undoStack.length;
  document.getElementById("redo").disabled = !state.doc.redoStack.length;
  const kernel = document.getElementById("kernel");
  kernel.textContent = `Python ${state.kernel}`;
  kernel.className = `kernel ${state.kernel}`;
  const dirty = state.edits !== state.savedEdits || state.unsavedOutputs;
  const saveState = document.getElementById("save-state");
  if (state.conflict) saveState.textContent = "changed on disk";
  else if (state.saving) saveState.textContent = "saving…";
  else saveState.textContent = dirty ? "unsaved changes" : "saved";
  saveState.className = state.conflict ? "conflict" : dirty ? "dirty" : "clean";
}

// --- editing -------------------------------------------------------------------------------

function changed() {
  state.edits += 1;
  updateToolbar();
  scheduleAutosave();
}

function select(id, extend = false) {
  if (!extend) state.selected = new Set();
  state.selected.add(id);
  state.cursor = id;
  render();
  blockEl(id)?.scrollIntoView({block: "nearest"});
}

function selectAll() {
  commitEdit();
  state.selected = new Set(state.doc.blocks.map((b) => b.id));
  render();
}

function startEdit(id, offset = null) {
  if (state.editing?.id === id) return;
  commitEdit();
  const block = state.doc.get(id);
  if (!block) return;
  state.editing = {id, preEdit: state.doc.snapshot(), source: block.source};
  state.cursor = id;
  state.selected = new Set([id]);
  const at = Math.min(offset ?? block.source.length, block.source.length);
  state.caret = {start: at, end: at};
  render();
}

// Leave the block being edited: record the edit for undo, drop it if it is an empty paragraph,
// and have the server render it again.
function commitEdit() {
  const editing = state.editing;
  if (!editing) return;
  state.editing = null;
  const block = state.doc.get(editing.id);
  if (!block) return render();
  if (block.source !== editing.source) state.doc.record(editing.preEdit);
  if (block.type === "text" && !block.source.trim() && state.doc.blocks.length > 1) {
    const i = state.doc.index(block.id);
    state.doc.remove([block.id]);
    const next = state.doc.blocks[Math.min(i, state.doc.blocks.length - 1)];
    state.cursor = next.id;
    state.selected = new Set([next.id]);
  } else if (block.source !== editing.source || !block.html) {
    rerender(block);
  }
  render();
}

// Ask the server for a block's HTML; a paragraph comes back split anew (a ```python block typed
// into it becomes a cell; a fence left open is closed).
function rerender(block) {
  const sent = block.source;
  block.html = block.type === "code" ? "" : `<p class="pending">${escapeHtml(sent)}</p>`;
  const request = call("api/render", {type: block.type, source: sent}).then((reply) => {
    const current = state.doc.get(block.id);
    if (!current || current.source !== sent || state.editing?.id === block.id) return;
    if (block.type === "code" || (reply.blocks.length === 1 && reply.blocks[0].type === "text")) {
      current.html = block.type === "code" ? reply.html : reply.blocks[0].html;
      if (block.type === "text") current.source = reply.blocks[0].source;
      blockEl(current.id)?.replaceWith(renderBlock(current)); // only this block: the one being edited stays as it is
      return;
    } else if (reply.blocks.length) {
      reply.blocks.at(-1).sep = current.sep;
      for (const b of reply.blocks) {
        if (b.type === "code") state.cells.set(b.id, {status: "idle", count: null, outputs: ""});
      }
      if (reply.blocks[0].type === "text") reply.blocks[0].id = current.id;
      if (state.cursor === current.id) state.cursor = reply.blocks[0].id;
      state.doc.replace(current.id, reply.blocks);
    }
    render();
  }).catch((e) => showMessage(`Could not render the block: ${e.message}`)).finally(() => state.pending.delete(request));
  state.pending.add(request);
}

function editKey(e, block, textarea) {
  const mod = e.ctrlKey || e.metaKey;
  const {selectionStart: start, selectionEnd: end, value} = textarea;
  if (e.key === "Escape") {
    e.preventDefault();
    commitEdit();
  } else if (e.key === "Enter" && e.shiftKey) {
    e.preventDefault();
    runAndAdvance(block.id);
  } else if (e.key === "Enter" && mod) {
    e.preventDefault();
    commitEdit();
    run([block.id]);
  } else if (mod && e.shiftKey && (e.key === "-" || e.key === "_")) {
    e.preventDefault();
    splitAt(block.id, start);
  } else if (mod && e.key.toLowerCase() === "a" && value && start === 0 && end === value.length) {
    e.preventDefault(); // a second Ctrl+A selects every block
    selectAll();
  } else if (e.altKey && (e.key === "ArrowUp" || e.key === "ArrowDown")) {
    e.preventDefault();
    moveBlock(block.id, e.key === "ArrowUp" ? -1 : 1);
  } else if (e.key === "ArrowUp" && !e.shiftKey && !mod && start === end && !value.slice(0, start).includes("\n")) {
    const previous = neighbor(block.id, -1);
    if (previous) {
      e.preventDefault();
      startEdit(previous.id);
    }
  } else if (e.key === "ArrowDown" && !e.shiftKey && !mod && start === end && !value.slice(end).includes("\n")) {
    const next = neighbor(block.id, 1);
    if (next) {
      e.preventDefault();
      startEdit(next.id, 0);
    }
  } else if (block.type === "code") {
    codeKey(e, textarea);
  } else {
    textKey(e, block, textarea);
  }
}

function codeKey(e, textarea) {
  const {selectionStart: start, selectionEnd: end, value} = textarea;
  const lineStart = value.lastIndexOf("\n", start - 1) + 1;
  if (e.key === "Tab" && !e.shiftKey && start === end) {
    e.preventDefault();
    insertText(textarea, "    ");
  } else if (e.key === "Tab") {
    e.preventDefault(); // indent or dedent the selected lines
    const block = value.slice(lineStart, end);
    const lines = block.split("\n").map((l) => (e.shiftKey ? l.replace(/^ {1,4}/, "") : "    " + l));
    textarea.setSelectionRange(lineStart, end);
    insertText(textarea, lines.join("\n"));
    textarea.setSelectionRange(lineStart, lineStart + lines.join("\n").length);
  } else if (e.key === "Enter" && !e.shiftKey && !e.ctrlKey && !e.metaKey && !e.altKey) {
    e.preventDefault();
    insertText(textarea, "\n" + indentAfter(value, start));
  } else if (e.key === "Backspace" && start === end && start > lineStart && /^( {4})+$/.test(value.slice(lineStart, start))) {
    e.preventDefault(); // one level of indentation at a time
    textarea.setSelectionRange(start - 4, start);
    insertText(textarea, "");
  }
}

function textKey(e, block, textarea) {
  const {selectionStart: start, selectionEnd: end, value} = textarea;
  if (e.key === "Enter" && !e.shiftKey && !e.ctrlKey && !e.metaKey && !e.altKey) {
    const action = enterAction(value, start, end);
    if (action.kind === "newline") return;
    e.preventDefault();
    state.doc.record(state.editing.preEdit);
    const i = state.doc.index(block.id);
    const sep = block.sep;
    block.source = action.before;
    block.sep = "\n\n";
    let focus;
    if (action.kind === "code") {
      focus = state.doc.insert(i + 1, newBlock("code"));
      state.cells.set(focus.id, {status: "idle", count: null, outputs: ""});
      if (action.after) rerender(state.doc.insert(i + 2, newBlock("text", action.after)));
    } else {
      focus = state.doc.insert(i + 1, newBlock("text", action.after));
    }
    state.doc.blocks[state.doc.index(focus.id) + (action.after && action.kind === "code" ? 1 : 0)].sep = sep;
    state.editing.source = null; // changed: committed below
    changed();
    startEdit(focus.id, 0);
  } else if (e.key === "Backspace" && start === 0 && end === 0) {
    const previous = neighbor(block.id, -1);
    if (!previous || (previous.type !== "text" && block.source)) return;
    e.preventDefault(); // join this paragraph to the one above (or drop it when empty)
    state.doc.record(state.editing.preEdit);
    const at = previous.source.length + (previous.source && block.source ? 1 : 0);
    if (previous.type === "text") {
      previous.source = [previous.source, block.source].filter(Boolean).join("\n");
      previous.sep = block.sep;
      previous.html = ""; // rendered again when the edit ends
    }
    state.doc.remove([block.id]);
    state.editing = null;
    changed();
    startEdit(previous.id, previous.type === "text" ? at : previous.source.length);
  } else if (e.key === "Delete" && start === value.length && end === value.length) {
    // only with nothing selected: a selection is deleted and nothing else (the paragraph break stays)
    const next = neighbor(block.id, 1);
    if (!next || next.type !== "text") return;
    e.preventDefault();
    state.doc.record(state.editing.preEdit);
    block.source = [block.source, next.source].filter(Boolean).join("\n");
    block.sep = next.sep;
    state.doc.remove([next.id]);
    state.caret = {start, end: start};
    textarea.value = block.source;
    textarea.setSelectionRange(start, start);
    changed();
    render();
  }
}

function splitAt(id, offset) {
  const block = state.doc.get(id);
  if (!block) return;
  state.doc.record(state.editing?.id === id ? state.editing.preEdit : undefined);
  const second = state.doc.split(id, offset);
  if (second.type === "code") state.cells.set(second.id, {status: "idle", count: null, outputs: ""});
  if (state.editing?.id === id) state.editing.source = null;
  else rerender(block);
  changed();
  startEdit(second.id, 0);
}

function insertBlock(type, below = true) {
  commitEdit();
  state.doc.record();
  const i = state.cursor ? state.doc.index(state.cursor) : state.doc.blocks.length - 1;
  const block = state.doc.insert(below ? i + 1 : Math.max(i, 0), newBlock(type));
  if (type === "code") state.cells.set(block.id, {status: "idle", count: null, outputs: ""});
  changed();
  startEdit(block.id, 0);
}

function deleteBlocks(ids) {
  commitEdit();
  ids = ids.filter((id) => state.doc.get(id));
  if (!ids.length) return;
  state.doc.record();
  const first = Math.min(...ids.map((id) => state.doc.index(id)));
  state.doc.remove(ids);
  changed();
  if (!state.doc.blocks.length) { // an empty notebook is one empty paragraph, ready to type in
    const block = state.doc.insert(0, newBlock("text"));
    state.doc.lead = "";
    startEdit(block.id, 0);
    return;
  }
  const next = state.doc.blocks[Math.min(first, state.doc.blocks.length - 1)];
  select(next.id);
}

function moveBlock(id, delta) {
  state.doc.record(state.editing?.id === id ? state.editing.preEdit : undefined);
  if (state.doc.move(id, delta)) {
    changed();
    render();
  }
}

function undo() {
  commitEdit();
  if (state.doc.undo()) afterRestore();
}

function redo() {
  commitEdit();
  if (state.doc.redo()) afterRestore();
}

function afterRestore() {
  if (!state.doc.get(state.cursor)) state.cursor = state.doc.blocks[0]?.id ?? null;
  state.selected = new Set(state.cursor ? [state.cursor] : []);
  changed();
  render();
}

// --- running -------------------------------------------------------------------------------

async function run(ids) {
  const cells = ids.map((id) => state.doc.get(id)).filter((b) => b && b.type === "code")
    .map((b) => ({id: b.id, source: b.source}));
  if (!cells.length) return;
  for (const c of cells) {
    state.cells.set(c.id, {...(state.cells.get(c.id) || {outputs: "", count: null}), status: "queued"});
    updateCell(c.id);
  }
  try {
    await call("api/run", {cells});
  } catch (e) {
    showMessage(`Could not run: ${e.message}`);
  }
}

function runAndAdvance(id) {
  commitEdit();
  run([id]);
  const next = neighbor(id, 1);
  if (next) select(next.id);
}

function codeIds(from = 0) {
  return state.doc.blocks.slice(from).filter((b) => b.type === "code").map((b) => b.id);
}

async function command(path, what) {
  try {
    await call(path, {});
  } catch (e) {
    showMessage(`Could not ${what}: ${e.message}`);
  }
}

// --- saving --------------------------------------------------------------------------------

function scheduleAutosave() {
  clearTimeout(state.autosaveTimer);
  if (!AUTOSAVE || state.conflict) return;
  state.autosaveTimer = setTimeout(() => {
    if (state.edits !== state.savedEdits || state.unsavedOutputs) save();
  }, AUTOSAVE * 1000);
}

async function save(force = false) {
  if (state.saving) await state.saving.catch(() => {});
  await Promise.all([...state.pending]);
  const edits = state.edits;
  const blocks = state.doc.blocks.map(({id, type, source, sep}) => ({id, type, source, sep}));
  state.saving = call("api/save", {lead: state.doc.lead, blocks, force});
  updateToolbar();
  try {
    await state.saving;
    state.savedEdits = edits;
    state.unsavedOutputs = false;
    state.conflict = false;
    document.getElementById("banner").hidden = true;
  } catch (e) {
    if (e.status === 409) showConflict();
    else showMessage(`Not saved: ${e.message}`);
  } finally {
    state.saving = null;
    updateToolbar();
  }
}

function showConflict() {
  state.conflict = true;
  clearTimeout(state.autosaveTimer);
  const banner = document.getElementById("banner");
  document.getElementById("banner-text").textContent =
    `${document.getElementById("name").textContent} changed on disk since the editor read it.`;
  banner.hidden = false;
  updateToolbar();
}

async function reload() {
  try {
    load(await call("api/reload", {}));
    document.getElementById("banner").hidden = true;
    showMessage("Reloaded from disk.", "info");
  } catch (e) {
    showMessage(`Could not reload: ${e.message}`);
  }
}

function load(data) {
  state.doc = new Doc(data.lead, data.blocks);
  state.cells = new Map(Object.entries(data.cells));
  state.version = data.version;
  state.kernel = data.kernel;
  state.editing = null;
  state.edits = state.savedEdits = 0;
  state.conflict = false;
  if (!state.doc.blocks.length) state.doc.blocks.push(newBlock("text"));
  state.cursor = state.doc.blocks[0].id;
  state.selected = new Set([state.cursor]);
  render();
  if (data.disk_changed) showConflict();
}

async function poll() {
  for (;;) {
    try {
      const reply = await call(`api/poll?since=${state.version}`);
      state.version = reply.version;
      state.kernel = reply.kernel;
      for (const [id, cell] of Object.entries(reply.cells)) {
        state.cells.set(id, cell);
        updateCell(id);
      }
      state.unsavedOutputs = reply.unsaved_outputs;
      if (reply.disk_changed && !state.conflict) showConflict();
      if (reply.unsaved_outputs && reply.kernel === "idle") scheduleAutosave();
      updateToolbar();
    } catch (e) {
      state.kernel = "disconnected";
      updateToolbar();
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

// --- events --------------------------------------------------------------------------------

function clickOffset(e, block, shown) {
  const range = document.caretRangeFromPoint?.(e.clientX, e.clientY);
  if (!range || !shown.contains(range.startContainer)) return null;
  const before = document.createRange();
  before.setStart(shown, 0);
  before.setEnd(range.startContainer, range.startOffset);
  const text = before.toString();
  return block.type === "code" ? text.length : sourceOffset(block.source, text);
}

docEl.addEventListener("click", (e) => {
  const node = e.target.closest(".block");
  if (!node) return;
  const id = node.dataset.id;
  const button = e.target.closest("button[data-action]");
  if (button) {
    const action = button.dataset.action;
    if (action === "run") runAndAdvance(id);
    else if (action === "up" || action === "down") moveBlock(id, action === "up" ? -1 : 1);
    else if (action === "split") splitAt(id, node.querySelector("textarea")?.selectionStart ?? 0);
    else if (action === "delete") deleteBlocks([id]);
    else if (action === "add-code" || action === "add-text") {
      state.cursor = id;
      insertBlock(action === "add-code" ? "code" : "text");
    }
    return;
  }
  if (e.target.closest("textarea, a")) return;
  const shown = e.target.closest(".prose, pre.code");
  if (e.shiftKey) select(id, true);
  else if (shown) startEdit(id, clickOffset(e, state.doc.get(id), shown));
  else select(id);
});

document.addEventListener("mousedown", (e) => {
  if (!e.target.closest(".block, header, #banner, #message")) commitEdit();
});

document.addEventListener("keydown", (e) => {
  const mod = e.ctrlKey || e.metaKey;
  const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
  if (mod && key === "s") {
    e.preventDefault();
    save();
    return;
  }
  if (e.target.closest?.("textarea, input")) return;
  const cursor = state.cursor;
  const twice = state.lastKey === key;
  state.lastKey = key;
  if (mod && key === "z") {
    e.preventDefault();
    (e.shiftKey ? redo : undo)();
  } else if (mod && key === "y") {
    e.preventDefault();
    redo();
  } else if (mod && key === "a") {
    e.preventDefault();
    selectAll();
  } else if (mod) {
    return;
  } else if (key === "Enter" && e.shiftKey && cursor) {
    e.preventDefault();
    runAndAdvance(cursor);
  } else if (key === "Enter" && cursor) {
    e.preventDefault();
    startEdit(cursor);
  } else if ((key === "ArrowUp" || key === "ArrowDown") && e.altKey && cursor) {
    e.preventDefault();
    moveBlock(cursor, key === "ArrowUp" ? -1 : 1);
  } else if ((key === "ArrowUp" || key === "k" || key === "ArrowDown" || key === "j") && cursor) {
    e.preventDefault();
    const next = neighbor(cursor, key === "ArrowUp" || key === "k" ? -1 : 1);
    if (next) select(next.id, e.shiftKey);
  } else if (key === "a" || key === "b") {
    e.preventDefault();
    insertBlock("code", key === "b");
  } else if (key === "Delete" || key === "Backspace" || (key === "d" && twice)) {
    e.preventDefault();
    state.lastKey = null;
    deleteBlocks([...state.selected]);
  } else if (key === "i" && twice) {
    state.lastKey = null;
    command("api/interrupt", "interrupt");
  } else if (key === "0" && twice) {
    state.lastKey = null;
    command("api/restart", "restart");
  }
});

const buttons = {
  "save": () => save(),
  "run-cell": () => state.cursor && runAndAdvance(state.cursor),
  "run-all": () => { commitEdit(); run(codeIds()); },
  "run-from": () => { commitEdit(); run(codeIds(Math.max(0, state.doc.index(state.cursor)))); },
  "interrupt": () => command("api/interrupt", "interrupt"),
  "restart": () => command("api/restart", "restart the kernel"),
  "undo": undo,
  "redo": redo,
  "add-code": () => insertBlock("code"),
  "add-text": () => insertBlock("text"),
  "reload": reload,
  "overwrite": () => save(true),
};
for (const [id, action] of Object.entries(buttons)) {
  document.getElementById(id).addEventListener("click", action);
}
document.getElementById("message").addEventListener("click", (e) => { e.currentTarget.hidden = true; });

window.addEventListener("beforeunload", (e) => {
  if (state.edits !== state.savedEdits) e.preventDefault();
});

call("api/notebook").then((data) => {
  load(data);
  document.body.dataset.ready = "true";
  poll();
}).catch((e) => showMessage(`Could not open the notebook: ${e.message}`));
