// Renders this server's /openapi.json as a list of operations: parameters, bodies, responses.
"use strict";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

// A description's `code` spans as <code>, the rest as text (the descriptions are Markdown's
// backticks; they were shown literally). No HTML is parsed from the spec.
function prose(text) {
  return (text || "").split("`").map((part, i) => (i % 2 ? el("code", {}, part) : part));
}

function resolve(spec, schema) {
  if (schema && schema.$ref) {
    const name = schema.$ref.split("/").pop();
    return { name, schema: spec.components.schemas[name] };
  }
  return { name: null, schema };
}

function schemaBlock(spec, schema) {
  const { name, schema: body } = resolve(spec, schema || {});
  const details = el("details", {}, el("summary", {}, name || body.type || "schema"));
  details.append(el("pre", {}, JSON.stringify(body, null, 2)));
  return details;
}

function parameters(op) {
  const table = el("table", {}, el("tr", {}, el("th", {}, "name"), el("th", {}, "in"),
    el("th", {}, "type"), el("th", {}, "description")));
  for (const p of op.parameters) {
    const type = p.schema.enum ? p.schema.enum.join(" | ") : p.schema.type;
    table.append(el("tr", {}, el("td", {}, el("code", {}, p.name + (p.required ? " *" : ""))),
      el("td", {}, p.in), el("td", {}, type), el("td", {}, ...prose(p.description))));
  }
  return table;
}

function operation(spec, path, method, op) {
  const body = el("div", { class: "op-body" });
  if (op.parameters && op.parameters.length) body.append(el("h3", {}, "Parameters"), parameters(op));
  if (op.requestBody) {
    body.append(el("h3", {}, "Request body"));
    if (op.requestBody.description) body.append(el("p", {}, ...prose(op.requestBody.description)));
    for (const [type, media] of Object.entries(op.requestBody.content)) {
      body.append(el("div", {}, el("code", {}, type)), schemaBlock(spec, media.schema));
    }
  }
  body.append(el("h3", {}, "Responses"));
  const table = el("table", {});
  for (const [status, response] of Object.entries(op.responses)) {
    const types = Object.keys(response.content || {}).join(", ");
    table.append(el("tr", {}, el("td", {}, el("code", {}, status)),
      el("td", {}, ...prose(response.description)), el("td", {}, types)));
  }
  body.append(table);
  const summary = el("summary", {}, el("span", { class: `method ${method}` }, method.toUpperCase()),
    el("span", { class: "path" }, path), el("span", {}, ...prose(op.summary)));
  return el("details", { class: "op", "data-path": path, "data-method": method }, summary, body);
}

async function main() {
  const spec = await (await fetch("/openapi.json")).json();
  document.getElementById("title").textContent = `${spec.info.title} ${spec.info.version}`;
  document.getElementById("description").replaceChildren(...prose(spec.info.description));
  const byTag = new Map();
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const tag = (op.tags || ["other"])[0];
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push(operation(spec, path, method, op));
    }
  }
  const root = document.getElementById("operations");
  root.replaceChildren();
  for (const [tag, ops] of byTag) root.append(el("h2", { class: "tag" }, tag), ...ops);
}

main().catch((err) => {
  document.getElementById("operations").textContent = `Could not load /openapi.json: ${err}`;
});
