// mxval's read-only web UI. Every string that comes from a job, a kernel or a
// log is put into the page with textContent (never parsed as markup), so it cannot
// inject markup or script.
"use strict";

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? wrapTd(c) : el("td", c));
  return tr;
}

function wrapTd(node) {
  const td = document.createElement("td");
  td.appendChild(node);
  return td;
}

function num(v) { return v === undefined ? 0 : Number(v); }
function shortState(s) { return String(s || "").replace(/^JOB_STATE_/, "").toLowerCase(); }
function verdict(run) {
  const v = run && run.accuracy ? String(run.accuracy.verdict || "") : "";
  return v.replace(/^VERDICT_/, "").toLowerCase() || "-";
}
function triageClass(r) {
  return r.triage && r.triage.triageClass ? String(r.triage.triageClass).replace(/^TRIAGE_CLASS_/, "") : "";
}
function shapeName(s) {
  const op = String(s.op || "").replace(/^OP_/, "").toLowerCase();
  return op + " B=" + num(s.b) + " N=" + num(s.n) + " K=" + num(s.k);
}
function us(run) { return run && run.timing ? num(run.timing.medianUs) : 0; }
// " PDL" after a time measured with programmatic dependent launch.
function pdl(run) { return run && run.launch === "LAUNCH_MODE_PDL" ? " PDL" : ""; }

async function getJson(url) {
  const r = await fetch(url, { headers: { Accept: "application/json" } });
  // With --auth-config an expired or missing session answers 401: sign in again.
  if (r.status === 401) { window.location.assign("/login"); throw new Error("signing in"); }
  if (!r.ok) throw new Error(url + ": HTTP " + r.status + " " + (await r.text()));
  return r.json();
}

async function jobsPage() {
  const status = document.getElementById("status");
  const body = document.querySelector("#jobs tbody");
  const data = await getJson("/api/jobs");
  const jobs = data.jobs || [];
  status.textContent = jobs.length + " job" + (jobs.length === 1 ? "" : "s");
  for (const j of jobs) {
    const a = el("a", j.jobId);
    a.href = "/job?id=" + encodeURIComponent(j.jobId);
    const p = j.progress || {};
    const failed = num(p.tasksFailed);
    body.appendChild(row([a, (j.spec && j.spec.name) || "", shortState(j.state),
                          num(p.tasksDone) + "/" + num(p.tasksTotal), el("span", failed, failed ? "fail" : "pass"),
                          j.created || ""]));
  }
}

// A log-log line plot of y(M) per series, as inline SVG.
function plot(title, series, yLabel) {
  const W = 380, H = 220, L = 48, B = 30, T = 10, R = 10;
  const pts = series.flatMap(s => s.points).filter(p => p[0] > 0 && p[1] > 0);
  const box = el("div", null, "plot");
  box.appendChild(el("div", title, "t"));
  if (!pts.length) { box.appendChild(el("div", "no data")); return box; }
  const lx = pts.map(p => Math.log2(p[0])), ly = pts.map(p => Math.log10(p[1]));
  const x0 = Math.min(...lx), x1 = Math.max(...lx) || 1, y0 = Math.min(...ly), y1 = Math.max(...ly);
  const sx = v => L + (W - L - R) * (x1 > x0 ? (Math.log2(v) - x0) / (x1 - x0) : 0.5);
  const sy = v => H - B - (H - B - T) * (y1 > y0 ? (Math.log10(v) - y0) / (y1 - y0) : 0.5);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  const text = (x, y, s, anchor) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("font-size", "10");
    if (anchor) t.setAttribute("text-anchor", anchor);
    t.textContent = s;
    svg.appendChild(t);
  };
  const axis = document.createElementNS(ns, "path");
  axis.setAttribute("d", "M" + L + " " + T + " V" + (H - B) + " H" + (W - R));
  axis.setAttribute("stroke", "#888"); axis.setAttribute("fill", "none");
  svg.appendChild(axis);
  text(L - 4, sy(Math.pow(10, y1)) + 4, Math.pow(10, y1).toPrecision(3), "end");
  text(L - 4, sy(Math.pow(10, y0)), Math.pow(10, y0).toPrecision(3), "end");
  text(L, H - B + 14, "M=" + Math.pow(2, x0));
  text(W - R, H - B + 14, "M=" + Math.pow(2, x1), "end");
  text(W / 2, H - 4, yLabel + " vs M (log-log)", "middle");
  const colors = ["#1a56c4", "#d93025"];
  series.forEach((s, i) => {
    const p = s.points.filter(q => q[0] > 0 && q[1] > 0).sort((a, b) => a[0] - b[0]);
    if (!p.length) return;
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", p.map(q => sx(q[0]) + "," + sy(q[1])).join(" "));
    line.setAttribute("fill", "none"); line.setAttribute("stroke", colors[i % 2]); line.setAttribute("stroke-width", "2");
    svg.appendChild(line);
    text(W - R - 4, T + 12 + 12 * i, s.name, "end");
    svg.lastChild.setAttribute("fill", colors[i % 2]);
  });
  box.appendChild(svg);
  return box;
}

async function jobPage() {
  const id = new URLSearchParams(location.search).get("id") || "";
  const status = document.getElementById("status");
  const job = await getJson("/api/job?id=" + encodeURIComponent(id));
  document.getElementById("title").textContent = "Job " + job.jobId + ((job.spec && job.spec.name) ? ": " + job.spec.name : "");
  const p = job.progress || {};
  status.textContent = shortState(job.state) + " — " + num(p.tasksDone) + " of " + num(p.tasksTotal) +
                       " tasks done, " + num(p.tasksFailed) + " failed";
  const results = job.results || [];
  // Triage: counts, then one section per class with reasons and evidence.
  const order = ["PR_TOUCHED", "UNTOUCHED_FAILURE", "UNKNOWN", "FLAKY", "PRE_EXISTING", "INFRA"];
  const counts = {};
  for (const r of results) { const c = triageClass(r); counts[c] = (counts[c] || 0) + 1; }
  const unrelated = (counts.PRE_EXISTING || 0) + (counts.INFRA || 0);
  document.getElementById("headline").textContent =
      (counts.PR_TOUCHED || 0) + " new failures, " + unrelated + " unrelated, " + (counts.FLAKY || 0) + " flaky, " +
      (counts.UNTOUCHED_FAILURE || 0) + " untouched, " + (counts.PASS || 0) + " passing";
  const classes = document.getElementById("classes");
  for (const c of order) {
    if (!counts[c]) continue;
    const sec = el("div");
    const h = el("h3");
    h.appendChild(el("span", c, "cls " + c));
    h.appendChild(document.createTextNode(" " + counts[c]));
    sec.appendChild(h);
    const ul = el("ul");
    for (const r of results.filter(r => triageClass(r) === c)) {
      const li = el("li");
      li.appendChild(el("b", shapeName(r.shape || {}) + " M=" + num(r.m) + " " + (r.arch || "")));
      li.appendChild(document.createTextNode(": " + (r.triage.reason || "")));
      const ev = el("ul", null, "evidence");
      for (const e of r.triage.evidence || []) ev.appendChild(el("li", e));
      li.appendChild(ev);
      ul.appendChild(li);
    }
    sec.appendChild(ul);
    classes.appendChild(sec);
  }
  // Plots per shape and arch.
  const groups = {};
  for (const r of results) {
    const key = shapeName(r.shape || {}) + " " + (r.arch || "");
    (groups[key] = groups[key] || []).push(r);
  }
  for (const [key, rs] of Object.entries(groups)) {
    document.getElementById("time-plots").appendChild(plot(key, [
      { name: "baseline", points: rs.map(r => [num(r.m), us(r.baseline)]) },
      { name: "candidate", points: rs.map(r => [num(r.m), us(r.candidate)]) }], "µs"));
    const err = run => run && run.accuracy ? Number(run.accuracy.relFroErr || 0) : 0;
    document.getElementById("error-plots").appendChild(plot(key, [
      { name: "baseline", points: rs.map(r => [num(r.m), err(r.baseline)]) },
      { name: "candidate", points: rs.map(r => [num(r.m), err(r.candidate)]) }], "rel. error"));
  }
  const body = document.querySelector("#results tbody");
  for (const r of results.sort((a, b) => num(a.m) - num(b.m))) {
    const b = us(r.baseline), c = us(r.candidate);
    const delta = b > 0 && c > 0 ? ((c - b) / b * 100).toFixed(1) + "%" : "-";
    const vb = verdict(r.baseline), vc = verdict(r.candidate);
    const tc = triageClass(r);
    body.appendChild(row([shapeName(r.shape || {}), num(r.m), r.arch || "", el("span", vb, vb === "pass" ? "pass" : "fail"),
                          el("span", vc, vc === "pass" ? "pass" : "fail"), b ? b.toFixed(1) + pdl(r.baseline) : "-", c ? c.toFixed(1) + pdl(r.candidate) : "-",
                          delta, el("span", tc, "cls " + tc)]));
  }
}

(document.body.dataset.page === "job" ? jobPage() : jobsPage()).catch(e => {
  document.getElementById("status").textContent = "error: " + e.message;
});
