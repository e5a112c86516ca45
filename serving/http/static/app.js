// The try-it page: posts the chosen file to /v1/ocr and draws each line's box over its page;
// copies its text in reading order and downloads it as JSON or as a searchable PDF.
// Images are shown from the file itself; PDF pages are rendered by the server (/v1/render), so
// they show exactly the pixels the boxes refer to. Plain DOM and SVG: no libraries, no network
// beyond this server.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (selector) => document.querySelector(selector);

const state = { file: null, result: null, urls: [] };

function setStatus(text, isError = false) {
  const status = $("#status");
  status.textContent = text;
  status.classList.toggle("error", isError);
}

function isPdf(file) {
  return file.type === "application/pdf" || /\.pdf$/i.test(file.name);
}

function formWith(file) {
  const form = new FormData();
  form.append("file", file, file.name);
  return form;
}

async function errorText(response) {
  const requestId = response.headers.get("X-Request-ID");
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body.error) message = `${body.error.message} (${body.error.code})`;
  } catch (_) {
    // not JSON: keep the status line
  }
  return requestId ? `${message}, request ${requestId}` : message;
}

function forgetImages() {
  for (const url of state.urls) URL.revokeObjectURL(url);
  state.urls = [];
}

async function recognise(file) {
  state.file = file;
  state.result = null;
  forgetImages();
  $("#pages").replaceChildren();
  $("#pages").dataset.state = "busy";
  $("#copy").disabled = true;
  $("#download").disabled = true;
  $("#download-pdf").disabled = true;
  setStatus(`Recognising ${file.name}…`);
  const started = performance.now();
  let response;
  try {
    response = await fetch("/v1/ocr?layout=true", { method: "POST", body: formWith(file) });
  } catch (err) {
    $("#pages").dataset.state = "error";
    setStatus(`Request failed: ${err}`, true);
    return;
  }
  if (!response.ok) {
    $("#pages").dataset.state = "error";
    setStatus(`Not recognised: ${await errorText(response)}`, true);
    return;
  }
  const result = await response.json();
  state.result = result;
  const seconds = ((performance.now() - started) / 1000).toFixed(2);
  const lines = result.pages.reduce((n, page) => n + page.lines.length, 0);
  const pages = result.pages.length;
  for (const page of result.pages) {
    $("#pages").append(await pageView(file, page));
  }
  $("#copy").disabled = false;
  $("#download").disabled = false;
  $("#download-pdf").disabled = false;
  $("#pages").dataset.state = "done";
  const requestId = response.headers.get("X-Request-ID");
  setStatus(
    `${file.name}: ${pages} page${pages === 1 ? "" : "s"}, ${lines} line${lines === 1 ? "" : "s"}` +
      ` in ${seconds} s (request ${requestId})`,
  );
}

async function pageImageUrl(file, page) {
  if (!isPdf(file)) return URL.createObjectURL(file);
  const response = await fetch(`/v1/render?page=${page.page}`, {
    method: "POST",
    body: formWith(file),
  });
  if (!response.ok) throw new Error(await errorText(response));
  return URL.createObjectURL(await response.blob());
}

async function pageView(file, page) {
  const view = $("#page-template").content.firstElementChild.cloneNode(true);
  view.dataset.page = page.page;
  view.querySelector(".page-title").textContent =
    `Page ${page.page + 1} · ${page.width} × ${page.height} px · ${page.lines.length} lines`;
  const stage = view.querySelector(".stage");
  const image = view.querySelector(".page-image");
  image.alt = `Page ${page.page + 1}`;
  try {
    const url = await pageImageUrl(file, page);
    state.urls.push(url);
    image.src = url;
  } catch (err) {
    // Boxes still go on a blank page of the reported size.
    image.remove();
    stage.classList.add("blank");
    stage.style.aspectRatio = `${page.width} / ${page.height}`;
    const note = document.createElement("p");
    note.className = "note";
    note.textContent = `The page image is not available (${err.message}); boxes drawn on a blank page.`;
    view.querySelector(".page-body").after(note);
  }
  const overlay = view.querySelector(".overlay");
  overlay.setAttribute("viewBox", `0 0 ${page.width} ${page.height}`);
  const list = view.querySelector(".lines");
  page.lines.forEach((line, index) => {
    const box = document.createElementNS(SVG_NS, "polygon");
    box.setAttribute("class", "box");
    box.setAttribute("points", line.box.map(([x, y]) => `${x},${y}`).join(" "));
    box.dataset.index = index;
    const title = document.createElementNS(SVG_NS, "title");
    title.textContent = line.text;
    box.append(title);
    overlay.append(box);

    const item = document.createElement("li");
    item.dataset.index = index;
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = line.text;
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = line.score.toFixed(3);
    item.append(text, score);
    list.append(item);

    const hot = (on) => {
      box.classList.toggle("hot", on);
      item.classList.toggle("hot", on);
    };
    for (const el of [box, item]) {
      el.addEventListener("mouseenter", () => hot(true));
      el.addEventListener("mouseleave", () => hot(false));
    }
  });
  return view;
}

// In reading order: the page's blocks (columns read one after the other) when the answer has
// them (`?layout=true`), else the lines as listed.
function pageText(page) {
  const order = page.blocks ? page.blocks.flatMap((block) => block.lines) : page.lines.keys();
  return [...order].map((index) => page.lines[index].text).join("\n");
}

function allText() {
  return state.result.pages.map(pageText).join("\n\n");
}

async function copyText() {
  const text = allText();
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  setStatus(`Copied ${text.split("\n").filter(Boolean).length} lines of text.`);
}

function saveBlob(blob, suffix) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = `${state.file.name.replace(/\.[^.]*$/, "")}${suffix}`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function downloadJson() {
  const blob = new Blob([JSON.stringify(state.result, null, 2)], { type: "application/json" });
  saveBlob(blob, ".ocr.json");
}

// The searchable PDF is made by the server (`/v1/ocr?format=pdf`): the file is sent again, and
// the answer keeps its page images (or a PDF's own pages) with the text as an invisible layer.
async function downloadPdf() {
  const button = $("#download-pdf");
  button.disabled = true;
  setStatus(`Making a searchable PDF of ${state.file.name}…`);
  try {
    const response = await fetch("/v1/ocr?format=pdf", {
      method: "POST",
      body: formWith(state.file),
    });
    if (!response.ok) {
      setStatus(`No searchable PDF: ${await errorText(response)}`, true);
      return;
    }
    const blob = await response.blob();
    saveBlob(blob, ".ocr.pdf");
    setStatus(`Saved a searchable PDF (${Math.ceil(blob.size / 1024)} KiB).`);
  } catch (err) {
    setStatus(`Request failed: ${err}`, true);
  } finally {
    button.disabled = false;
  }
}

function setUp() {
  const input = $("#file");
  const drop = $("#drop");
  input.addEventListener("change", () => {
    if (input.files.length) recognise(input.files[0]);
  });
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    if (event.dataTransfer.files.length) recognise(event.dataTransfer.files[0]);
  });
  $("#copy").addEventListener("click", copyText);
  $("#download").addEventListener("click", downloadJson);
  $("#download-pdf").addEventListener("click", downloadPdf);
}

setUp();
