// mrope inspection page: calls this service's own endpoints and shows what they return.
"use strict";

const KIND_COLOURS = {
  text: [205, 205, 205], wrapper: [120, 120, 120], timestamp: [245, 166, 35], image: [86, 140, 215],
  video: [76, 175, 110], thumbnail: [160, 110, 205], audio: [214, 120, 60],
};
const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];
const MIN_SEGMENT_PX = 6;

let chosenFiles = [];
let lastPositions = null;

const $ = (id) => document.getElementById(id);

function viridis(x) {
  const f = Math.min(Math.max(x, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(f), VIRIDIS.length - 2);
  const a = VIRIDIS[i], b = VIRIDIS[i + 1], u = f - i;
  return [0, 1, 2].map((c) => Math.round(a[c] + (b[c] - a[c]) * u));
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = false;
  $("result").hidden = true;
}

async function handle(response) {
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    const err = body && body.error ? body.error : null;
    showError(err ? `${response.status} ${err.code}: ${err.message}` : `${response.status} ${response.statusText}`);
    return;
  }
  $("error").hidden = true;
  render(body);
}

function range(row, start, stop) {
  let lo = Infinity, hi = -Infinity;
  for (let i = start; i < stop; i++) { const v = row[i]; if (v < lo) lo = v; if (v > hi) hi = v; }
  return lo === hi ? String(lo) : `${lo}..${hi}`;
}

function segmentsOf(spans) {
  const out = [];
  for (const s of spans) {
    const last = out[out.length - 1];
    if (last && last.index === s.index && last.stop === s.start) last.stop = s.stop;
    else out.push({ index: s.index, start: s.start, stop: s.stop });
  }
  return out;
}

function drawPicture(data) {
  const canvas = $("picture");
  const ctx = canvas.getContext("2d");
  const W = canvas.width, left = 40, width = W - left - 10;
  const [t, h, w] = data.positions;
  const n = data.num_tokens;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, W, canvas.height);
  if (!n) return;
  // token axis compressed by segment: each at least MIN_SEGMENT_PX, the rest by token count
  const segs = segmentsOf(data.spans);
  const minPx = Math.min(MIN_SEGMENT_PX, width / segs.length);
  const spare = width - minPx * segs.length;
  const columns = new Int32Array(width);
  let x = 0;
  for (const s of segs) {
    const px = minPx + spare * (s.stop - s.start) / n;
    const x1 = Math.min(width, Math.round(x + px));
    for (let c = Math.round(x); c < x1; c++) {
      columns[c] = Math.min(s.stop - 1, s.start + Math.floor((c - Math.round(x)) * (s.stop - s.start) / Math.max(x1 - Math.round(x), 1)));
    }
    x += px;
  }
  const kinds = new Array(n).fill("text");
  for (const s of data.spans) for (let i = s.start; i < s.stop; i++) kinds[i] = s.kind;
  let vmax = 1;
  for (const row of data.positions) for (const v of row) if (v > vmax) vmax = v;
  const img = ctx.createImageData(width, 1);
  const paint = (y, height, colourOf) => {
    for (let c = 0; c < width; c++) {
      const rgb = colourOf(columns[c]);
      img.data.set([rgb[0], rgb[1], rgb[2], 255], c * 4);
    }
    for (let k = 0; k < height; k++) ctx.putImageData(img, left, y + k);
  };
  ctx.fillStyle = "#1e1e1e";
  ctx.font = "12px sans-serif";
  ctx.fillText("span", 4, 28);
  paint(14, 22, (i) => KIND_COLOURS[kinds[i]] || [30, 30, 30]);
  [["t", t, 44], ["h", h, 80], ["w", w, 116]].forEach(([name, row, y]) => {
    ctx.fillStyle = "#1e1e1e";
    ctx.fillText(name, 14, y + 18);
    paint(y, 30, (i) => viridis(row[i] / vmax));
  });
  ctx.fillStyle = "#6e6e6e";
  ctx.fillText(`segments: ${segs.length} · tokens 0..${n - 1} · t, h, w coloured 0..${vmax}`, left, 164);
}

function render(data) {
  lastPositions = data;
  const [t, h, w] = data.positions;
  let top = -1;
  for (const row of data.positions) for (const v of row) if (v > top) top = v;
  $("summary").textContent =
    `${data.num_tokens} tokens in ${data.spans.length} spans, max position ${top}, delta ${data.delta}: ` +
    `decode token i (i >= ${data.num_tokens}) gets position i + delta` +
    (data.notes && data.notes.length ? ` · notes: ${data.notes.join("; ")}` : "");
  const body = $("spans").querySelector("tbody");
  body.textContent = "";
  for (const s of data.spans) {
    const tr = document.createElement("tr");
    const cells = [s.index, s.kind, s.stop - s.start === 1 ? `${s.start}` : `${s.start}..${s.stop - 1}`,
      range(t, s.start, s.stop), range(h, s.start, s.stop), range(w, s.start, s.stop),
      s.grid ? s.grid.join("x") : "", s.tile ? `r${s.tile[0]} c${s.tile[1]}` : ""];
    for (const c of cells) { const td = document.createElement("td"); td.textContent = String(c); tr.appendChild(td); }
    body.appendChild(tr);
  }
  renderFiles(data.files || []);
  $("result").hidden = false;
  drawPicture(data);
}

function renderFiles(files) {
  // what each uploaded file read: the route's loader, the size as read, a video's rotation, own rate
  // and frames, the size the model is given and the encoder grid (before the merge)
  const body = $("read").querySelector("tbody");
  body.textContent = "";
  for (const f of files) {
    const video = f.kind === "video";
    const cells = [f.filename || `#${f.index}`, f.kind, f.route || "",
      f.width != null ? `${f.width}x${f.height}` : "", video ? `${f.rotation}` : "",
      video ? `${f.native_fps}` : "", video ? `${f.sampled_frames} / ${f.num_frames}` : "",
      f.resized ? f.resized.join("x") : "", f.grid ? f.grid.join("x") : ""];
    const tr = document.createElement("tr");
    for (const c of cells) { const td = document.createElement("td"); td.textContent = String(c); tr.appendChild(td); }
    body.appendChild(tr);
  }
  $("read").hidden = files.length === 0;
}

function npyBytes(positions) {
  // [3, T] as the service's npy output: int32 when every value fits, else int64; float32 for
  // families with fractional time
  const T = positions[0].length;
  const whole = positions.every((row) => row.every((v) => Number.isInteger(v)));
  const narrow = whole && positions.every((row) => row.every((v) => v >= -(2 ** 31) && v < 2 ** 31));
  const descr = !whole ? "<f4" : narrow ? "<i4" : "<i8";
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (3, ${T}), }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += " ".repeat(pad % 64) + "\n";
  const data = !whole ? new Float32Array(3 * T) : narrow ? new Int32Array(3 * T) : new BigInt64Array(3 * T);
  const wide = whole && !narrow;
  positions.forEach((row, r) => row.forEach((v, i) => { data[r * T + i] = wide ? BigInt(v) : v; }));
  const out = new Uint8Array(10 + header.length + data.byteLength);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, header.length & 255, header.length >> 8]);
  for (let i = 0; i < header.length; i++) out[10 + i] = header.charCodeAt(i);
  out.set(new Uint8Array(data.buffer), 10 + header.length);
  return out;
}

function download() {
  if (!lastPositions) return;
  const blob = new Blob([npyBytes(lastPositions.positions)], { type: "application/octet-stream" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = "positions.npy";
  document.body.appendChild(a);
  a.click();
  a.remove();
}

function setFiles(list) {
  chosenFiles = Array.from(list);
  $("chosen").textContent = chosenFiles.length ? chosenFiles.map((f) => f.name).join(", ") : "no files";
}

async function runRequest() {
  try {
    const response = await fetch("/v1/positions", {
      method: "POST", headers: { "content-type": "application/json" }, body: $("request").value,
    });
    await handle(response);
  } catch (e) { showError(`request failed: ${e}`); }
}

async function runUpload() {
  if (!chosenFiles.length) { showError("choose or drop at least one image or video first"); return; }
  const form = new FormData();
  form.append("model", $("model").value);
  form.append("route", $("route").value);
  if ($("layout").value.trim()) form.append("layout", $("layout").value.trim());
  for (const f of chosenFiles) form.append("files", f, f.name);
  try { await handle(await fetch("/v1/positions/upload", { method: "POST", body: form })); }
  catch (e) { showError(`upload failed: ${e}`); }
}

async function loadModels() {
  try {
    const response = await fetch("/v1/presets");
    const names = Object.keys((await response.json()).presets);
    for (const name of names) {
      const option = document.createElement("option");
      option.value = option.textContent = name;
      $("model").appendChild(option);
    }
    $("model").value = names.includes("qwen2.5-vl") ? "qwen2.5-vl" : names[0];
  } catch (e) { showError(`cannot list the models: ${e}`); }
}

$("run").addEventListener("click", runRequest);
$("upload").addEventListener("click", runUpload);
$("download").addEventListener("click", download);
$("files").addEventListener("change", (e) => setFiles(e.target.files));
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); setFiles(e.dataTransfer.files); });
document.body.dataset.ready = "loading";
loadModels().then(() => { document.body.dataset.ready = "yes"; });
