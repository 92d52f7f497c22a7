// The fleet page: reads graphsignal-server's JSON API only (the key goes in
// X-API-Key, as every client sends it), draws with the vendored uPlot.
// The key comes from the URL fragment (#key=KEY, removed from the address
// bar at once) or the form, and stays in this tab's sessionStorage.
"use strict";

(function () {
  const REFRESH_MS = 5000;
  const LIVE_NS = 120e9; // seen within two minutes: live
  const $ = (id) => document.getElementById(id);
  const state = { key: null, instances: [], selected: null, charts: [], timer: null };

  function setMessage(text) { $("message").textContent = text || ""; }

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children || []) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return e;
  }

  // -- the key --------------------------------------------------------------------
  function readKey() {
    const params = new URLSearchParams(location.hash.slice(1));
    const fromHash = params.get("key");
    if (fromHash) {
      sessionStorage.setItem("graphsignal-key", fromHash);
      params.delete("key");
      const rest = params.toString();
      history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
    }
    return sessionStorage.getItem("graphsignal-key");
  }

  function askKey(why) {
    state.key = null;
    sessionStorage.removeItem("graphsignal-key");
    $("keyform").hidden = false;
    $("forget").hidden = true;
    document.body.dataset.state = "needs-key";
    setMessage(why || "this server asks for an API key");
  }

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path) {
    const r = await fetch(path, { headers: { "X-API-Key": state.key }, cache: "no-store" });
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) throw new ApiError(r.status, (body && body.error) || ("HTTP " + r.status));
    return body;
  }

  // -- formatting -----------------------------------------------------------------
  function ago(ns) {
    const s = Math.max(0, (Date.now() * 1e6 - ns) / 1e9);
    if (s < 90) return Math.round(s) + " s ago";
    if (s < 5400) return Math.round(s / 60) + " min ago";
    if (s < 172800) return Math.round(s / 3600) + " h ago";
    return Math.round(s / 86400) + " d ago";
  }

  function axisLabels(ticks) {
    // as many decimals as the spacing of the ticks needs, at any scale
    const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 0;
    const digits = step > 0 ? Math.min(10, Math.max(0, Math.ceil(-Math.log10(step)))) : 2;
    return ticks.map((v) => v == null ? "" : Math.abs(v) >= 1000 ? Math.round(v).toLocaleString("en-US") : v.toFixed(digits));
  }

  function duration(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(2) + " s";
    if (ns >= 1e6) return (ns / 1e6).toFixed(2) + " ms";
    return (ns / 1e3).toFixed(1) + " µs";
  }

  function tagsOf(ctx) {
    // what tells two runs of one service apart: the context's tags beyond the id and host
    return Object.entries(ctx).filter(([k]) => k !== "instance.id" && k !== "host.name")
      .map(([k, v]) => k + "=" + v).join(", ");
  }

  function startedAt(ns) {
    const d = new Date(ns / 1e6);
    const pad = (x) => String(x).padStart(2, "0");
    const today = new Date();
    const time = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    return d.toDateString() === today.toDateString() ? time : d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + time;
  }

  function statusOf(inst) {
    if (inst.ended_ns != null) return ["ended", inst.exit_status != null ? "ended (exit " + inst.exit_status + ")" : "ended"];
    return Date.now() * 1e6 - inst.last_seen_ns <= LIVE_NS ? ["live", "live"] : ["silent", "silent"];
  }

  // -- the instance list --------------------------------------------------------------
  function renderInstances() {
    const tbody = $("instance-table").tBodies[0];
    tbody.textContent = "";
    for (const inst of state.instances) {
      const [cls, text] = statusOf(inst);
      const ctx = inst.context || {};
      const tr = el("tr", { "data-instance-id": inst.instance_id }, [
        el("td", { class: "id", text: inst.instance_id }),
        el("td", { class: "name", text: String(ctx["host.name"] || "—") }),
        el("td", { text: inst.service || "—" }),
        el("td", { class: "tags", text: tagsOf(ctx) || "—" }),
        el("td", { text: inst.start_ns != null ? startedAt(inst.start_ns) : "—", title: inst.start_ns != null ? new Date(inst.start_ns / 1e6).toISOString() : "" }),
        el("td", { text: String(inst.gpus == null ? "—" : inst.gpus) }),
        el("td", { text: ago(inst.last_seen_ns) }),
        el("td", { class: "status-" + cls, text: text }),
      ]);
      if (inst.instance_id === state.selected) tr.classList.add("selected");
      tr.addEventListener("click", () => select(inst.instance_id));
      tbody.appendChild(tr);
    }
    $("instances").dataset.count = String(state.instances.length);
  }

  // -- charts --------------------------------------------------------------------------
  const PALETTE = ["#2f6fde", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5c940d",
                   "#364fc7", "#a61e4d", "#087f5b", "#495057"];

  function gpuLabel(tags) { return "GPU " + (tags["device.index"] != null ? tags["device.index"] : (tags["device.uuid"] || "?")); }

  function seriesNamed(block, names) { return block.series.filter((s) => names.includes(s.name)); }

  function sumLines(lines, n) {
    // lines: arrays of n values (null: unknown); the sum where any is known
    const out = new Array(n).fill(null);
    for (const vals of lines) vals.forEach((v, i) => { if (v != null) out[i] = (out[i] || 0) + v; });
    return out;
  }

  const OWN_SKIP = /^(gpu_|host_|process_|cuda_|rocm_|nvtx_|graphsignal_|prometheus_)/;

  function ownLabel(tags) {
    // a probe's tags beyond its process; else its process
    const rest = Object.entries(tags).filter(([k]) => k !== "process.pid").map(([k, v]) => k + "=" + v).join(", ");
    return rest || ("pid " + (tags["process.pid"] || "?"));
  }

  function ownSpecs(block) {
    // the workload's own series (its probes): histograms as quantiles, counters as rates, gauges as values
    const byName = new Map();
    for (const s of block.series) {
      if (!s.tags || s.tags["process.pid"] == null || OWN_SKIP.test(s.name) || s.name.includes(":")) continue;
      if (!byName.has(s.name)) byName.set(s.name, []);
      byName.get(s.name).push(s);
    }
    const specs = [];
    for (const [name, ss] of [...byName.entries()].sort()) {
      const ns = name.endsWith("_nanoseconds");
      const scale = ns ? 1e-6 : 1;
      const unit = ns ? "ms" : "";
      const id = "own-" + name.replace(/[^A-Za-z0-9_-]/g, "_");
      const type = ss[0].type;
      if (type === "histogram") {
        const lines = [];
        for (const s of ss) {
          for (const q of ["p50", "p95", "p99"]) {
            const vals = (s.quantiles || {})[q];
            if (vals) lines.push({ label: (ss.length > 1 ? ownLabel(s.tags) + " " : "") + q, values: vals.map((v) => v == null ? null : v * scale) });
          }
        }
        specs.push({ id: id, title: name + " quantiles" + (unit ? " (" + unit + ")" : ""), lines: lines });
        const rates = ss.filter((s) => s.rates).map((s) => ({ label: ownLabel(s.tags), values: s.rates }));
        specs.push({ id: id + "-rate", title: name + " observations/s", lines: rates });
      } else if (type === "counter") {
        specs.push({ id: id, title: name + " (/s)", lines: ss.map((s) => ({ label: ownLabel(s.tags), values: s.values })) });
      } else if (type === "gauge") {
        specs.push({ id: id, title: name + (unit ? " (" + unit + ")" : ""), lines: ss.map((s) => ({ label: ownLabel(s.tags), values: s.values.map((v) => v == null ? null : v * scale) })) });
      } else if (type === "profile") {
        const lines = [];
        for (const s of ss) for (const [f, vals] of Object.entries(s.frames || {})) lines.push({ label: f, values: vals.map((v) => v == null ? null : v * scale) });
        specs.push({ id: id, title: name + " by frame" + (ns ? " (ms/s)" : " (/s)"), lines: lines.slice(0, 8) });
      }
    }
    return specs;
  }

  function hostSpecs(block, n) {
    const pid = (s) => "pid " + (s.tags["process.pid"] || s.tags["process.root_pid"] || "?");
    const cpu = seriesNamed(block, ["host_cpu_usage_percent"]).map((s) => ({ label: "host (% of all cores)", values: s.values }));
    const cores = seriesNamed(block, ["process_cpu_time_nanoseconds"]).filter((s) => s.tags.scope !== "process_tree")
      .map((s) => ({ label: pid(s) + " (% of one core)", values: s.values.map((v) => v == null ? null : v / 1e7) }));
    const mem = seriesNamed(block, ["host_memory_usage_bytes"]).map((s) => ({ label: "host", values: s.values.map((v) => v == null ? null : v / 2 ** 30) }))
      .concat(seriesNamed(block, ["process_memory_usage_bytes"]).map((s) => ({ label: pid(s) + " RSS", values: s.values.map((v) => v == null ? null : v / 2 ** 30) })));
    return [{ id: "host-cpu", title: "host CPU (% of all cores)", lines: cpu },
            { id: "process-cpu", title: "process CPU (% of one core)", lines: cores },
            { id: "memory", title: "memory (GiB)", lines: mem }];
  }

  function chartSpecs(block) {
    const n = block.times_ns.length;
    const specs = [];
    const gauges = (name, scale) => seriesNamed(block, [name]).map((s) => ({ label: gpuLabel(s.tags), values: s.values.map((v) => v == null ? null : v * scale) }));
    specs.push({ id: "gpu-utilization", title: "GPU utilization (%)", lines: gauges("gpu_utilization_percent", 1) });
    specs.push({ id: "gpu-memory", title: "GPU memory used (GiB)", lines: gauges("gpu_memory_used_bytes", 1 / 2 ** 30) });
    specs.push({ id: "gpu-power", title: "GPU power (W)", lines: gauges("gpu_power_usage_watts", 1) });
    const tokens = [];
    for (const [label, test] of [["generation", (name) => !name.includes("prompt")], ["prompt", (name) => name.includes("prompt")]]) {
      // the engine's counters (scraped: no process tag), not a probe that counts tokens
      const ss = block.series.filter((s) => s.type === "counter" && /tokens|predicted/.test(s.name) && !s.name.startsWith("cuda_") && !(s.tags && s.tags["process.pid"] != null) && test(s.name));
      if (ss.length) tokens.push({ label: label, values: sumLines(ss.map((s) => s.values), n) });
    }
    specs.push({ id: "tokens", title: "tokens/s", lines: tokens });
    const byCat = {};
    for (const s of seriesNamed(block, ["cuda_kernels_nanoseconds", "rocm_kernels_nanoseconds"])) {
      for (const [cat, vals] of Object.entries(s.frames || {})) (byCat[cat] = byCat[cat] || []).push(vals);
    }
    const cats = Object.entries(byCat).map(([cat, lines]) => ({ label: cat, values: sumLines(lines, n).map((v) => v == null ? null : v / 1e6) }));
    cats.sort((a, b) => b.values.reduce((x, y) => x + (y || 0), 0) - a.values.reduce((x, y) => x + (y || 0), 0));
    specs.push({ id: "kernels-by-category", title: "kernel time by category (ms/s)", lines: cats.slice(0, 8) });
    const busy = seriesNamed(block, ["gpu_busy_time_nanoseconds"]).map((s) => ({ label: gpuLabel(s.tags), values: s.values.map((v) => v == null ? null : v / 1e7) }));
    if (busy.length) specs.push({ id: "gpu-busy", title: "GPU busy (%)", lines: busy });
    return ownSpecs(block).concat(specs, hostSpecs(block, n));
  }

  function hasPoints(spec) { return spec.lines.some((l) => l.values.some((v) => v != null)); }

  function drawCharts(block) {
    for (const c of state.charts) c.destroy();
    state.charts = [];
    const box = $("charts");
    box.textContent = "";
    const xs = block.times_ns.map((t) => t / 1e9);
    // charts with nothing to draw (GPU charts of a CPU workload) are named in one line, not drawn empty
    const all = chartSpecs(block);
    const empty = all.filter((spec) => !hasPoints(spec));
    $("charts-empty").textContent = empty.length ? "no data: " + empty.map((spec) => spec.title).join(", ") : "";
    $("charts-empty").dataset.ids = empty.map((spec) => spec.id).join(" ");
    for (const spec of all.filter(hasPoints)) {
      const div = el("div", { class: "chart", id: "chart-" + spec.id });
      box.appendChild(div);
      const width = Math.max(300, div.clientWidth - 10);  // the grid's column, once the div is in it
      const points = spec.lines.reduce((m, l) => Math.max(m, l.values.filter((v) => v != null).length), 0);
      if (!spec.lines.length || points === 0) {
        div.appendChild(el("div", { class: "empty", text: spec.title + ": no data" }));
        div.dataset.drawn = "empty";
        continue;
      }
      const opts = {
        title: spec.title, width: width, height: 200,
        scales: { x: { time: true } },
        legend: { live: true },
        series: [{}].concat(spec.lines.map((l, i) => ({ label: l.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: false, points: { show: xs.length < 3 } }))),
        axes: [{}, { size: 64, values: (u, ticks) => axisLabels(ticks) }],
      };
      state.charts.push(new uPlot(opts, [xs].concat(spec.lines.map((l) => l.values)), div));
      div.dataset.drawn = "1";
      div.dataset.points = String(points);
    }
  }

  // -- tables ---------------------------------------------------------------------------
  function statsOf(snap, metricName) {
    // the window's stats when it spans some time, else those since start
    const w = snap.window && snap.window.covered_seconds > 0 ? snap.window.metrics : null;
    return (w || snap.metrics).filter((m) => m.name === metricName || (typeof metricName === "function" && metricName(m)));
  }

  function topFrames(metrics, keyOf, limit) {
    const acc = new Map();
    let total = 0;
    for (const m of metrics) {
      for (const f of (m.stats && m.stats.frames) || []) {
        const k = keyOf(m, f);
        const cur = acc.get(k.key) || Object.assign({ value: 0 }, k);
        cur.value += f.value || 0;
        total += f.value || 0;
        acc.set(k.key, cur);
      }
    }
    return [[...acc.values()].sort((a, b) => b.value - a.value).slice(0, limit), total];
  }

  function fillTable(id, rows) {
    const tbody = $(id).tBodies[0];
    tbody.textContent = "";
    for (const cells of rows) tbody.appendChild(el("tr", {}, cells.map((c, i) => el("td", { class: i === 0 ? "name" : "", text: c }))));
    $(id).dataset.rows = String(rows.length);
  }

  function renderTables(snap) {
    const kernels = statsOf(snap, (m) => m.name === "cuda_kernels_nanoseconds" || m.name === "rocm_kernels_nanoseconds");
    const [ktop, ktotal] = topFrames(kernels, (m, f) => ({ key: f.display_name || f.name, name: f.display_name || f.name, category: f.category || "" }), 10);
    fillTable("kernels", ktop.map((k) => [k.name, k.category, ktotal ? (100 * k.value / ktotal).toFixed(1) + " %" : "—", duration(k.value)]));
    const isStage = (m) => m.type === "profile" && (m.name === "nvtx_ranges_nanoseconds" || !/^(cuda_|rocm_|nvtx_range_gpu)/.test(m.name));
    const stages = statsOf(snap, isStage);
    const [stop, stotal] = topFrames(stages, (m, f) => ({ key: m.name + "\u0000" + f.name, name: f.name, from: m.name === "nvtx_ranges_nanoseconds" ? "NVTX " + (m.tags["nvtx.domain"] || "") : m.name }), 10);
    fillTable("stages", stop.map((s) => [s.name, s.from, stotal ? (100 * s.value / stotal).toFixed(1) + " %" : "—", duration(s.value)]));
    const ul = $("errors");
    ul.textContent = "";
    const current = (snap.errors || []).filter((e) => e.resolved_ns == null).reverse();
    for (const e of current.slice(0, 20)) {
      ul.appendChild(el("li", {}, [el("span", { class: "level-" + e.level, text: e.level }), " " + e.message + (e.count > 1 ? " (×" + e.count + ")" : "") + " — " + ago(e.last_ns || e.timestamp_ns)]));
    }
    if (!current.length) ul.appendChild(el("li", { text: "none" }));
    ul.dataset.count = String(current.length);
  }

  // -- loading ---------------------------------------------------------------------------
  async function select(iid) {
    state.selected = iid;
    renderInstances();
    const seconds = Number($("range").value);
    const q = "instance_id=" + encodeURIComponent(iid);
    document.body.dataset.state = "loading";
    try {
      const [hist, snap] = await Promise.all([api("/api/v1/history?" + q + "&seconds=" + seconds), api("/api/v1/signals?" + q + "&window=" + seconds)]);
      if (state.selected !== iid) return;
      const inst = state.instances.find((i) => i.instance_id === iid) || { context: {} };
      $("detail").hidden = false;
      $("detail").dataset.instanceId = iid;
      $("detail-title").textContent = (inst.context["host.name"] || iid) + (inst.service ? " · " + inst.service : "") + " · " + iid;
      const block = hist.history;
      $("detail-note").textContent = block.times_ns.length < 2 ? "one snapshot so far: the server keeps one a second for 15 minutes, then one a minute" :
        block.times_ns.length + " points, one every " + block.interval_seconds + " s";
      drawCharts(block);
      renderTables(snap);
      document.body.dataset.state = "ready";
      setMessage("");
    } catch (e) {
      if (e.status === 401) return askKey("the key was refused: " + e.message);
      document.body.dataset.state = "error";
      setMessage(e.message);
    }
  }

  async function refresh() {
    try {
      const doc = await api("/api/v1/instances");
      state.instances = doc.instances;
      renderInstances();
      const params = new URLSearchParams(location.hash.slice(1));
      const wanted = state.selected || params.get("instance");
      const range = params.get("range");
      if (range && !state.selected && [...$("range").options].some((o) => o.value === range)) $("range").value = range;
      const pick = state.instances.find((i) => i.instance_id === wanted) || state.instances[0];
      if (pick) await select(pick.instance_id);
      else { document.body.dataset.state = "ready"; setMessage("no instance has uploaded with this key yet"); }
    } catch (e) {
      if (e.status === 401) return askKey("the key was refused: " + e.message);
      document.body.dataset.state = "error";
      setMessage(e.message);
    }
  }

  function start() {
    $("keyform").hidden = true;
    $("forget").hidden = false;
    refresh();
    clearInterval(state.timer);
    state.timer = setInterval(refresh, REFRESH_MS);
  }

  $("keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const k = $("key").value.trim();
    if (!k) return;
    sessionStorage.setItem("graphsignal-key", k);
    state.key = k;
    $("key").value = "";
    start();
  });
  $("forget").addEventListener("click", () => { clearInterval(state.timer); askKey("key forgotten"); });
  $("range").addEventListener("change", () => { if (state.selected) select(state.selected); });

  state.key = readKey();
  if (state.key) start(); else askKey();
})();
