// jetmq status page: polls the broker's read-only JSON API (same origin, no CDN).
"use strict";
const HISTORY = 300; // seconds of the chart
const samples = []; // {t, in, out}
let last = null;

function text(id, value) { document.getElementById(id).textContent = value; }

function human(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (bytes >= 1024 && i < units.length - 1) { bytes /= 1024; i++; }
  return bytes.toFixed(i ? 1 : 0) + " " + units[i];
}

function fill(tableId, rows, cells) {
  const body = document.querySelector("#" + tableId + " tbody");
  body.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    for (const value of cells(row)) {
      const td = document.createElement("td");
      td.textContent = value;
      tr.appendChild(td);
    }
    return tr;
  }));
}

async function get(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(path + ": " + response.status);
  return response.json();
}

function draw() {
  const canvas = document.getElementById("chart");
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 30;
  ctx.clearRect(0, 0, w, h);
  const top = Math.max(1, ...samples.map((s) => Math.max(s.in, s.out)));
  ctx.strokeStyle = "#e4e7ec"; ctx.fillStyle = "#8a93a3"; ctx.font = "11px sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = pad / 2 + (h - pad) * i / 4;
    ctx.beginPath(); ctx.moveTo(pad + 10, y); ctx.lineTo(w, y); ctx.stroke();
    ctx.fillText(Math.round(top * (4 - i) / 4), 2, y + 4);
  }
  for (const [key, color] of [["in", "#2a7de1"], ["out", "#e0702a"]]) {
    ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
    samples.forEach((s, i) => {
      const x = pad + 10 + (w - pad - 10) * (i + HISTORY - samples.length) / (HISTORY - 1);
      const y = pad / 2 + (h - pad) * (1 - s[key] / top);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
}

async function pollStats() {
  try {
    const s = await get("/api/stats");
    text("version", "version " + s.version);
    text("uptime", "up " + s.uptime + " s");
    text("clients_connected", s.clients_connected);
    text("clients_total", s.clients_total);
    text("subscriptions", s.subscriptions);
    text("retained", s.retained);
    text("store", human(s.store_size_bytes) + " · " + s.store_streams + " streams");
    text("jetstream", s.jetstream_enabled ? s.jetstream_streams + " streams · " +
      s.jetstream_consumers + " consumers" : "off");
    if (last !== null && s.time > last.time) {
      const dt = s.time - last.time;
      const rin = (s.publish_received - last.publish_received) / dt;
      const rout = (s.publish_sent - last.publish_sent) / dt;
      samples.push({ t: s.time, in: rin, out: rout });
      while (samples.length > HISTORY) samples.shift();
      text("rate_in", rin.toFixed(1));
      text("rate_out", rout.toFixed(1));
      draw();
    }
    last = s;
    text("updated", "updated " + new Date().toLocaleTimeString());
  } catch (err) {
    text("updated", "broker unreachable: " + err.message);
  }
}

async function pollTables() {
  try {
    const [clients, subs, streams] = await Promise.all([
      get("/api/clients"), get("/api/subscriptions"), get("/api/streams"),
    ]);
    fill("clients", clients, (c) => [c.client_id, c.connected ? "yes" : "no", c.protocol,
      c.expiry, c.subscriptions, c.inflight, c.queued]);
    fill("subscriptions_table", subs, (s) => [s.client_id, s.filter, s.qos]);
    fill("streams", streams, (s) => [s.name, s.subjects.join(" "), s.messages, human(s.bytes),
      s.first_seq, s.last_seq,
      s.consumers.map((c) => c.name + " (" + c.num_pending + " / " + c.num_ack_pending + " / " +
        c.ack_floor + ")").join(", ") || "–"]);
  } catch (err) {
    text("updated", "broker unreachable: " + err.message);
  }
}

// The bridge's fields in the order of the table (broker.bridge.state.BridgeState.snapshot).
const BRIDGE_FIELDS = ["name", "connected", "server", "last_error", "in_flight", "pending",
  "forward_queue"];

async function pollBridge() {
  try {
    const b = await get("/api/bridge");
    document.getElementById("bridge_section").hidden = !b.configured;
    if (!b.configured) {
      text("bridge_state", "not configured");
      fill("bridge", [], () => []);
      return;
    }
    text("bridge_state", b.connected ? "connected" : "disconnected");
    const rows = BRIDGE_FIELDS.map((k) => [k, b[k]]);
    for (const [k, v] of Object.entries(b)) {
      if (k !== "configured" && !BRIDGE_FIELDS.includes(k)) rows.push([k, v]);
    }
    fill("bridge", rows, ([k, v]) => [k, v === true ? "yes" : v === false ? "no" : v === "" ? "–" : v]);
  } catch (err) {
    text("updated", "broker unreachable: " + err.message);
  }
}

pollStats();
pollTables();
pollBridge();
setInterval(pollStats, 1000);
setInterval(pollTables, 5000);
setInterval(pollBridge, 2000);
