// payrail console: the live view refreshes its figures without a reload.
// Served from /console/assets (the Content-Security-Policy allows no
// inline script). Nothing else on the console needs JavaScript.
"use strict";

(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const source = live.dataset.source;
  const updated = document.getElementById("live-updated");
  const chart = document.getElementById("live-chart");
  const history = [];
  const HISTORY_MAX = 150; // 5 minutes at one sample every 2 s
  const PERIOD_MS = 2000;

  function format(key, value) {
    return key.endsWith("_per_second") ? value.toFixed(1) : String(value);
  }

  function draw() {
    if (!chart || !chart.getContext) return;
    const ctx = chart.getContext("2d");
    const w = chart.width, h = chart.height;
    ctx.clearRect(0, 0, w, h);
    const peak = Math.max(1, ...history.map((s) => Math.max(s.creates_per_second, s.settlements_per_second)));
    const series = [["creates_per_second", "#2563eb"], ["settlements_per_second", "#16a34a"]];
    for (const [key, colour] of series) {
      ctx.strokeStyle = colour;
      ctx.lineWidth = 2;
      ctx.beginPath();
      history.forEach((s, i) => {
        const x = (i / (HISTORY_MAX - 1)) * w;
        const y = h - (s[key] / peak) * (h - 10) - 5;
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
    }
    ctx.fillStyle = "#555";
    ctx.font = "12px sans-serif";
    ctx.fillText("peak " + peak.toFixed(0) + "/s   blue: creates   green: settlements", 8, 14);
  }

  async function refresh() {
    try {
      const response = await fetch(source, { credentials: "same-origin", cache: "no-store" });
      if (response.redirected || !response.ok) throw new Error("HTTP " + response.status);
      const figures = await response.json();
      for (const el of live.querySelectorAll("[data-live]")) {
        const key = el.dataset.live;
        if (key in figures) el.textContent = format(key, figures[key]);
      }
      history.push(figures);
      if (history.length > HISTORY_MAX) history.shift();
      draw();
      if (updated) updated.textContent = new Date().toISOString().slice(11, 19) + " UTC";
      live.classList.remove("stale");
    } catch (e) {
      live.classList.add("stale");
      if (updated) updated.textContent = "failed (" + e.message + "); retrying";
    }
  }

  refresh();
  setInterval(refresh, PERIOD_MS);
})();
