// The console's pages, drawn from Larder answers over the WebSocket (larder.js). No framework: each page is a
// function that fills <main>; the hash is the route (#/collections, #/c/NAME, #/r/NAME/ID, #/photos/NAME, #/stats).
import { Larder, LarderError, Opcode } from "./larder.js";
import { parseFilter } from "./filter.js";

const main = document.getElementById("main");
const signinForm = document.getElementById("signin");
const userForm = document.getElementById("signin-user");
let larder = null;
let canWrite = false;
let isUser = false;  // signed in as a user: the collections' rules decide, and role-only pages are hidden
let watch = null;  // the table's live subscription: { id, paused }

/** An element: el("td", { class: "id" }, "text", child...). Text is always set as text, never as HTML. */
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== false && value !== undefined) node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function show(...nodes) {
  main.replaceChildren(...nodes);
}

function errorText(error) {
  return error instanceof LarderError ? `${error.name}: ${error.message}` : String(error.message ?? error);
}

const socketURL = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;

/** Connects with `credentials`: { token }, { idToken } or { session } (Larder.connect). */
async function signIn(credentials) {
  larder = await Larder.connect(socketURL, credentials);
  isUser = Boolean(larder.hello.user);
  const role = isUser ? null : larder.hello.authRequired ? larder.hello.role : "admin";
  // A user's writes are the rules' to allow: the page offers them, and the server refuses what the rules forbid.
  canWrite = isUser || role === "write" || role === "admin";
  document.getElementById("role").textContent = isUser ? `user: ${larder.hello.user.id}` : `role: ${role}`;
  document.getElementById("stats-link").hidden = isUser;
  document.getElementById("nav").hidden = false;
  larder.onClose = () => { document.getElementById("role").textContent = "disconnected"; };
  larder.onEvent = (event) => liveEvent(event);
}

/** Opens a new connection with the credentials this tab signed in with, after the last one ended. */
async function reconnect() {
  const saved = JSON.parse(sessionStorage.getItem("larder.credentials") ?? "null");
  if (!saved) throw new Error("the connection ended, and this tab keeps no credentials to open another");
  await signIn(saved);
}

/**
 * Signs in with what `credentials` gives, keeps it for this tab (sessionStorage) and opens the first page; a refusal
 * is shown on `errorLine`.
 */
async function start(credentials, errorLine) {
  errorLine.textContent = "";
  try {
    await signIn(credentials);
    sessionStorage.setItem("larder.credentials", JSON.stringify(credentials));
    if (!location.hash || location.hash === "#/") location.hash = "#/collections";
    else route();
  } catch (error) {
    errorLine.textContent = `Sign-in refused: ${errorText(error)}`;
  }
}

signinForm.addEventListener("submit", (event) => {
  event.preventDefault();
  start({ token: document.getElementById("token").value }, document.getElementById("signin-error"));
});

// A user: an account the server keeps (SIGN_IN on a connection without credentials answers a session, which the
// next connection presents), or an ID token from the app's identity provider.
document.getElementById("signin-user").addEventListener("submit", async (event) => {
  event.preventDefault();
  const errorLine = document.getElementById("signin-user-error");
  const idToken = document.getElementById("idtoken").value.trim();
  if (idToken) return start({ idToken }, errorLine);
  errorLine.textContent = "";
  let anonymous = null;
  try {
    anonymous = await Larder.connect(socketURL);
    const answer = await anonymous.request(Opcode.SIGN_IN, {
      email: document.getElementById("email").value, password: document.getElementById("password").value });
    await start({ session: answer.session }, errorLine);
  } catch (error) {
    errorLine.textContent = `Sign-in refused: ${errorText(error)}`;
  } finally {
    anonymous?.close();
  }
});

document.getElementById("signout").addEventListener("click", async () => {
  const saved = JSON.parse(sessionStorage.getItem("larder.credentials") ?? "null");
  sessionStorage.removeItem("larder.credentials");
  // A session is revoked on the server (an ID token is its provider's): through this connection, or a new one when
  // this one has ended.
  if (saved?.session) {
    const through = larder && !larder.closed ? larder : await Larder.connect(socketURL).catch(() => null);
    await through?.request(Opcode.SIGN_OUT, { session: saved.session }).catch(() => {});
    if (through !== larder) through?.close();
  }
  watch = null;
  larder?.close();
  location.hash = "";
  location.reload();
});

async function route() {
  if (!larder) return show(signinForm, userForm);
  if (watch) {
    const ending = watch;
    watch = null;
    larder.request(Opcode.UNWATCH, { subscription: ending.id }).catch(() => {});
  }
  const [, page, a, b] = location.hash.split("/").map(decodeURIComponent);
  try {
    if (page === "c") return await recordsPage(a);
    if (page === "r") return await recordPage(a, b);
    if (page === "photos") return await photosPage(a);
    if (page === "stats") return await statsPage();
    return await collectionsPage();
  } catch (error) {
    show(el("p", { class: "error", role: "alert" }, errorText(error)));
  }
}
window.addEventListener("hashchange", route);

/** A user may not list collections (COLLECTIONS is a role token's): they open one by name, as their app does. */
function openCollectionPage() {
  const name = el("input", { id: "collection-name", "aria-label": "collection", placeholder: "todos", required: true });
  const opened = JSON.parse(sessionStorage.getItem("larder.opened") ?? "[]");
  show(el("h2", {}, "Collections"),
    el("form", { class: "toolbar", id: "open-collection", onsubmit: (event) => {
      event.preventDefault();
      const collection = name.value.trim();
      sessionStorage.setItem("larder.opened", JSON.stringify([...new Set([collection, ...opened])].slice(0, 20)));
      location.hash = `#/c/${encodeURIComponent(collection)}`;
    } }, name, el("button", { type: "submit" }, "Open")),
    el("ul", { id: "opened" }, ...opened.map((c) => el("li", {}, el("a", { href: `#/c/${encodeURIComponent(c)}` }, c)))));
}

async function collectionsPage() {
  if (isUser) return openCollectionPage();
  const { collections } = await larder.request(Opcode.COLLECTIONS);
  const rows = collections.map((c) =>
    el("tr", {}, el("td", {}, el("a", { href: `#/c/${encodeURIComponent(c.name)}` }, c.name)),
      el("td", {}, c.count), el("td", {}, el("a", { href: `#/photos/${encodeURIComponent(c.name)}` }, "photos"))));
  show(el("h2", {}, "Collections"),
    el("div", { class: "table-wrap" }, el("table", { id: "collections" },
      el("thead", {}, el("tr", {}, el("th", {}, "Collection"), el("th", {}, "Records"), el("th", {}, "Photos"))),
      el("tbody", {}, ...rows))));
}

// The record table's state, kept while the page is open.
const table = { collection: null, filter: "", sort: null, order: "asc", cursors: [null], page: 0, columns: null, limit: 50 };

async function recordsPage(collection) {
  if (table.collection !== collection) {
    Object.assign(table, { collection, filter: "", sort: null, order: "asc", cursors: [null], page: 0, columns: null });
  }
  const filterInput = el("input", { type: "search", id: "filter", value: table.filter,
    placeholder: "price<50 and store~mart", "aria-label": "filter" });
  const errorLine = el("p", { class: "error", role: "alert" });
  const body = el("tbody");
  const head = el("thead");
  const columnsBox = el("details", { id: "records-columns" }, el("summary", {}, "Columns"));
  const info = el("span", { id: "page-info" });
  const next = el("button", { type: "button", id: "next" }, "Next page");
  const prev = el("button", { type: "button", id: "prev" }, "Previous page");
  const live = el("input", { type: "checkbox", id: "live", checked: true });
  const create = el("button", { type: "button", id: "create", hidden: !canWrite }, "New record");

  async function load() {
    errorLine.textContent = "";
    let filter;
    try {
      filter = parseFilter(table.filter);
    } catch (error) {
      errorLine.textContent = `Filter: ${error.message}`;
      return;
    }
    const request = { collection, limit: table.limit };
    if (filter) request.filter = filter;
    if (table.sort) request.sort = [{ field: table.sort, order: table.order }];
    if (table.cursors[table.page]) request.cursor = table.cursors[table.page];
    let answer;
    try {
      answer = await larder.request(Opcode.SEARCH, request);
    } catch (error) {
      errorLine.textContent = errorText(error);
      return;
    }
    table.cursors[table.page + 1] = answer.nextCursor;
    const fields = new Set();
    for (const record of answer.records) for (const name of Object.keys(record.data ?? {})) fields.add(name);
    // The columns are chosen from the first page that has records (an empty one has no fields to show).
    if (!table.columns && answer.records.length) table.columns = [...fields].slice(0, 6);
    drawColumns([...new Set([...(table.columns ?? []), ...fields])]);
    head.replaceChildren(el("tr", {}, el("th", {}, "id"), el("th", {}, "rev"),
      ...(table.columns ?? []).map((name) => el("th", {}, el("button", { type: "button", "data-sort": name,
        onclick: () => sortBy(name) }, name + (table.sort === name ? (table.order === "asc" ? " ▲" : " ▼") : ""))))));
    body.replaceChildren(...answer.records.map(row));
    info.textContent = `page ${table.page + 1}, ${answer.records.length} records`;
    next.disabled = !answer.nextCursor;
    prev.disabled = table.page === 0;
  }

  function row(record) {
    if (!table.columns) table.columns = Object.keys(record.data ?? {}).slice(0, 6);
    const copy = el("button", { type: "button", title: "copy the id", "aria-label": `copy ${record.id}`,
      onclick: () => navigator.clipboard?.writeText(record.id) }, "copy");
    return el("tr", { "data-id": record.id },
      el("td", { class: "id" }, el("a", { href: `#/r/${encodeURIComponent(collection)}/${record.id}` }, record.id), " ",
        copy),
      el("td", { class: "rev" }, record.rev),
      ...table.columns.map((name) => el("td", { "data-field": name }, cell(record.data?.[name]))));
  }

  function drawColumns(all) {
    columnsBox.replaceChildren(el("summary", {}, "Columns"), ...all.map((name) => el("label", {},
      el("input", { type: "checkbox", checked: (table.columns ?? []).includes(name), onchange: (event) => {
        const shown = table.columns ?? [];
        table.columns = event.target.checked ? [...shown, name] : shown.filter((c) => c !== name);
        load();
      } }), name, " ")));
  }

  function sortBy(name) {
    table.order = table.sort === name && table.order === "asc" ? "desc" : "asc";
    table.sort = name;
    table.cursors = [null];
    table.page = 0;
    load();
  }

  filterInput.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    table.filter = filterInput.value;
    table.cursors = [null];
    table.page = 0;
    load();
  });
  next.addEventListener("click", () => { table.page += 1; load(); });
  prev.addEventListener("click", () => { table.page = Math.max(0, table.page - 1); load(); });
  // Paused, the table lets events go by; resumed, it reloads the page it shows, so that nothing missed is missing.
  live.addEventListener("change", () => {
    if (!watch) return;
    watch.paused = !live.checked;
    if (live.checked) load();
  });
  create.addEventListener("click", () => { location.hash = `#/r/${encodeURIComponent(collection)}/new`; });

  show(el("h2", {}, collection),
    el("div", { class: "toolbar" }, filterInput, create, el("label", {}, live, " live")),
    errorLine, columnsBox,
    el("div", { class: "table-wrap" }, el("table", { id: "records" }, head, body)),
    el("div", { class: "toolbar" }, prev, next, info));
  await load();
  const answer = await larder.request(Opcode.WATCH, { collection });
  watch = { id: answer.subscription, paused: false, collection, body, row };
}

function cell(value) {
  if (value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

/** An event of the table's subscription: a changed row is redrawn and marked, a new one appears on top. */
function liveEvent(event) {
  if (!watch || watch.paused || event.subscription !== watch.id || !event.id) return;
  const existing = watch.body.querySelector(`tr[data-id="${CSS.escape(event.id)}"]`);
  if (event.kind === "delete") {
    existing?.remove();
    return;
  }
  if (!event.record) return;
  const fresh = watch.row(event.record);
  if (existing) {
    fresh.classList.add("changed");
    existing.replaceWith(fresh);
  } else if (event.kind === "create") {
    fresh.classList.add("new");
    watch.body.prepend(fresh);
  }
}

async function recordPage(collection, id) {
  const isNew = id === "new";
  const record = isNew ? { data: {} } : await larder.request(Opcode.GET, { collection, id });
  const editor = el("textarea", { id: "json", "aria-label": "record JSON", readonly: !canWrite },
    JSON.stringify(record.data, null, 2));
  const status = el("p", { id: "status", role: "status" });
  const conflictBox = el("div", { id: "conflict" });
  let rev = record.rev;

  async function save(overwrite = false) {
    let data;
    try {
      data = JSON.parse(editor.value);
    } catch (error) {
      status.textContent = `Not JSON: ${error.message}`;
      return;
    }
    try {
      const saved = isNew
        ? await larder.request(Opcode.CREATE, { collection, data })
        : await larder.request(Opcode.REPLACE, overwrite ? { collection, id, data } : { collection, id, data, rev });
      rev = saved.rev;
      conflictBox.replaceChildren();
      status.textContent = `Saved: revision ${saved.rev}`;
      if (isNew) location.hash = `#/r/${encodeURIComponent(collection)}/${saved.id}`;
    } catch (error) {
      if (error instanceof LarderError && error.name === "CONFLICT") return showConflict(data);
      status.textContent = errorText(error);
    }
  }

  async function showConflict(mine) {
    const theirs = await larder.request(Opcode.GET, { collection, id });
    status.textContent = `CONFLICT: the record changed to revision ${theirs.rev} since you loaded revision ${rev}.`;
    conflictBox.replaceChildren(el("div", { class: "conflict" },
      el("div", {}, el("h3", {}, "Yours"), el("pre", { id: "mine" }, JSON.stringify(mine, null, 2))),
      el("div", {}, el("h3", {}, `Theirs (revision ${theirs.rev})`),
        el("pre", { id: "theirs" }, JSON.stringify(theirs.data, null, 2)))),
      el("div", { class: "toolbar" },
        el("button", { type: "button", id: "reload", onclick: () => {
          editor.value = JSON.stringify(theirs.data, null, 2);
          rev = theirs.rev;
          conflictBox.replaceChildren();
          status.textContent = `Reloaded revision ${theirs.rev}`;
        } }, "Reload theirs"),
        el("button", { type: "button", id: "overwrite", onclick: () => save(true) }, "Overwrite with mine")));
  }

  async function remove() {
    if (!confirm(`Delete record ${id}?`)) return;
    try {
      await larder.request(Opcode.DELETE, { collection, id });
      location.hash = `#/c/${encodeURIComponent(collection)}`;
    } catch (error) {
      status.textContent = errorText(error);
    }
  }

  const controls = canWrite
    ? [el("button", { type: "button", id: "save", onclick: () => save() }, isNew ? "Create" : "Save"),
       isNew ? "" : el("button", { type: "button", id: "delete", onclick: remove }, "Delete")]
    : [];
  show(el("h2", {}, `${collection} / ${isNew ? "new record" : id}`),
    el("p", {}, isNew ? "" : `revision ${record.rev}`),
    editor, el("div", { class: "toolbar" }, ...controls), status, conflictBox);
}

async function photosPage(collection) {
  const gallery = el("div", { class: "gallery", id: "gallery" });
  const status = el("p", { id: "upload-status", role: "status" });
  const progress = el("progress", { id: "upload-progress", hidden: true, "aria-label": "upload progress" });
  const drop = el("div", { class: "drop", id: "drop", tabindex: canWrite && "0", role: canWrite && "button" },
    canWrite ? "Drop JPEG photos here, or press Enter to choose them, to attach them to a new record" : "");
  const urls = [];
  async function load() {
    for (const url of urls.splice(0)) URL.revokeObjectURL(url);
    const page = await larder.request(Opcode.SEARCH, { collection, limit: 100 });
    const tiles = [];
    for (const record of page.records) {
      const { blobs } = await larder.request(Opcode.BLOB_LIST, { attachedTo: { collection, id: record.id } });
      for (const blob of blobs) {
        const thumbnail = await larder.request(Opcode.BLOB_GET, { id: blob.id, thumbnail: 256 });
        const url = URL.createObjectURL(new Blob([thumbnail.binary], { type: "image/jpeg" }));
        urls.push(url);
        tiles.push(el("a", { href: "#", "data-blob": blob.id, onclick: (event) => { event.preventDefault(); full(blob.id); } },
          el("img", { src: url, alt: `photo ${blob.id}` })));
      }
    }
    gallery.replaceChildren(...tiles);
  }
  async function full(id) {
    const answer = await larder.request(Opcode.BLOB_GET, { id });
    const url = URL.createObjectURL(new Blob([answer.binary], { type: "image/jpeg" }));
    urls.push(url);
    show(el("p", {}, el("a", { href: `#/photos/${encodeURIComponent(collection)}` }, "back")),
      el("img", { id: "full", src: url, alt: `photo ${id}` }),
      el("p", {}, el("a", { id: "download", href: url, download: `${id}.jpg` }, "Download")));
  }
  async function upload(file) {
    const bytes = new Uint8Array(await file.arrayBuffer());
    const record = await larder.request(Opcode.CREATE, { collection, data: { name: file.name } });
    const started = await larder.request(Opcode.BLOB_UPLOAD, { size: bytes.length,
      attach: { collection, id: record.id } });
    const chunk = started.chunkBytes ?? larder.hello.limits.blobChunkBytes ?? 1 << 20;
    let offset = started.offset ?? 0;
    let failures = 0;
    progress.max = bytes.length;
    progress.value = offset;
    progress.hidden = false;
    while (offset < bytes.length) {
      const part = bytes.subarray(offset, offset + chunk);
      try {
        const answer = await larder.request(Opcode.BLOB_UPLOAD_CHUNK,
          { upload: started.upload, offset, crc32: crc32(part) }, part);
        offset = answer.offset ?? offset + part.length;
      } catch (error) {
        // The upload goes on from where the server says it stands, on a new connection when this one ended.
        if (++failures > 3) throw error;
        if (!larder.isOpen) {
          status.textContent = `${file.name}: connection lost, resuming`;
          await reconnect();
        }
        offset = (await larder.request(Opcode.BLOB_UPLOAD_STATUS, { upload: started.upload })).offset;
      }
      progress.value = offset;
      status.textContent = `${file.name}: ${Math.round((100 * offset) / bytes.length)}%`;
    }
    await larder.request(Opcode.BLOB_UPLOAD_FINISH, { upload: started.upload });
    status.textContent = `${file.name}: uploaded`;
  }
  const picker = el("input", { type: "file", id: "pick", accept: "image/jpeg", multiple: true, hidden: !canWrite,
    "aria-label": "choose JPEG photos to upload" });
  async function uploadAll(files) {
    if (!canWrite) return;
    try {
      for (const file of files) await upload(file);
      await load();
    } catch (error) {
      status.textContent = errorText(error);
    }
  }
  picker.addEventListener("change", () => uploadAll([...picker.files]));
  // The drop zone is a button to the keyboard: Enter or Space opens the file picker.
  drop.addEventListener("keydown", (event) => {
    if (!canWrite || (event.key !== "Enter" && event.key !== " ")) return;
    event.preventDefault();
    picker.click();
  });
  drop.addEventListener("dragover", (event) => event.preventDefault());
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    uploadAll([...event.dataTransfer.files]);
  });
  show(el("h2", {}, `${collection}: photos`), drop, picker, progress, status, gallery);
  await load();
}

const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

/** CRC-32 (IEEE), as BLOB_UPLOAD_CHUNK checks it. */
function crc32(bytes) {
  let c = 0xffffffff;
  for (const byte of bytes) c = crcTable[(c ^ byte) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

let statsTimer = null;
window.addEventListener("hashchange", () => { clearInterval(statsTimer); statsTimer = null; });

async function statsPage() {
  const rates = [];
  let previous = null;
  const summary = el("p", { id: "connections" });
  const rateBox = el("div", { id: "rate" });
  const latencyBox = el("div", { id: "latency" });
  const raw = el("pre", { id: "stats-json" });
  show(el("h2", {}, "Stats"), summary, el("h3", {}, "Requests per second"), rateBox,
    el("h3", {}, "Latency per operation (p50 dark, p99 light, µs)"), latencyBox,
    el("details", {}, el("summary", {}, "Everything STATS answers"), raw));
  async function refresh() {
    const stats = await larder.request(Opcode.STATS);
    const now = performance.now();
    const total = stats.requests?.total ?? 0;
    if (previous) rates.push(((total - previous.total) * 1000) / Math.max(1, now - previous.at));
    if (rates.length > 60) rates.shift();
    previous = { total, at: now };
    const store = stats.store ?? {};
    // Change-feed lag: how far this server's follower is behind the shared log (none on a server of its own).
    const lag = stats.follower ? JSON.stringify(stats.follower) : "none (one server)";
    summary.textContent = `connections: ${stats.connections?.open ?? "?"} open; ${total} requests; store: `
      + `${store.documents ?? "?"} records, ${store.blobs ?? "?"} photos, ${store.databaseBytes ?? "?"} bytes; `
      + `change feed: seq ${store.lastChangeSeq ?? "?"}, ${stats.watch?.subscriptions ?? 0} subscriptions, lag ${lag}`;
    rateBox.replaceChildren(line(rates));
    const rows = Object.entries(stats.requests?.byOpcode ?? {}).map(([name, op]) =>
      ({ name, p50: op.latencyMicros?.p50 ?? 0, p99: op.latencyMicros?.p99 ?? 0 }));
    latencyBox.replaceChildren(chart(rows));
    raw.textContent = JSON.stringify(stats, null, 2);
  }
  await refresh();
  statsTimer = setInterval(() => refresh().catch(() => {}), 2000);
}

/** Requests per second over the last two minutes, as an SVG line. */
function line(values) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const width = 600;
  const height = 120;
  const max = Math.max(1, ...values);
  svg.setAttribute("viewBox", `0 0 ${width} ${height + 20}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `requests per second, now ${Math.round(values.at(-1) ?? 0)}`);
  const path = document.createElementNS(ns, "polyline");
  path.setAttribute("points", values.map((v, i) => `${(i * width) / 60},${height - (height * v) / max}`).join(" "));
  path.setAttribute("fill", "none");
  path.setAttribute("stroke", "#2d6cdf");
  path.setAttribute("stroke-width", "2");
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", 0);
  label.setAttribute("y", height + 16);
  label.textContent = `now ${Math.round(values.at(-1) ?? 0)}/s, peak ${Math.round(max)}/s`;
  svg.append(path, label);
  return svg;
}

/** p50 and p99 per operation as horizontal bars, drawn as SVG. */
function chart(rows) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const width = 600;
  const barHeight = 14;
  const max = Math.max(1, ...rows.map((r) => r.p99));
  svg.setAttribute("viewBox", `0 0 ${width} ${rows.length * 2 * barHeight + 20}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "p50 and p99 latency per operation");
  rows.forEach((r, i) => {
    for (const [k, value, color] of [[0, r.p50, "#2d6cdf"], [1, r.p99, "#b0c8f0"]]) {
      const rect = document.createElementNS(ns, "rect");
      rect.setAttribute("x", 170);
      rect.setAttribute("y", (2 * i + k) * barHeight);
      rect.setAttribute("width", Math.max(1, ((width - 280) * value) / max));
      rect.setAttribute("height", barHeight - 2);
      rect.setAttribute("fill", color);
      svg.append(rect);
    }
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", 0);
    label.setAttribute("y", (2 * i + 1) * barHeight);
    label.textContent = `${r.name}`;
    svg.append(label);
    const numbers = document.createElementNS(ns, "text");
    numbers.setAttribute("x", width - 95);
    numbers.setAttribute("y", (2 * i + 1) * barHeight);
    numbers.textContent = `${r.p50}/${r.p99} µs`;
    svg.append(numbers);
  });
  return svg;
}

const saved = sessionStorage.getItem("larder.credentials");
if (saved !== null) {
  signIn(JSON.parse(saved)).then(route, () => show(signinForm, userForm));
} else {
  route();
}
