// A meta-evaluation run's chart: grouped bars of the run's figures (per category for pairs, per
// criterion for scores) from the #metaeval-data json_script. The tables carry the same numbers, so
// without JavaScript (or Chart.js) the page still says everything.
(function () {
  "use strict";

  const COLORS = ["#2a5db0", "#d9822b", "#14213d"];

  function draw() {
    const source = document.getElementById("metaeval-data");
    const section = document.getElementById("metaeval-chart");
    if (!source || !section || typeof window.Chart === "undefined") return;
    const chart = JSON.parse(source.textContent);
    if (!chart.labels || !chart.labels.length) return;
    const scope = document.getElementById("metaeval-chart-scope");

    const datasets = () => chart.datasets
      .filter((d) => chart.kind !== "scores" || d.scope === scope.value)
      .map((d, k) => ({label: d.label, data: d.data, backgroundColor: COLORS[k % COLORS.length]}));
    section.hidden = false;
    const reduceMotion = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
    const bars = new window.Chart(document.getElementById("metaeval-chart-canvas"), {
      type: "bar",
      data: {labels: chart.labels, datasets: datasets()},
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: reduceMotion ? false : {duration: 250},
        scales: {y: chart.kind === "pairs" ? {min: 0, max: 1, title: {display: true, text: "share of pairs"}}
                                           : {min: -1, max: 1, title: {display: true, text: "correlation"}}},
        plugins: {
          legend: {position: "bottom"},
          tooltip: {callbacks: {
            label: (item) => `${item.dataset.label}: ${item.raw === null ? "—" : item.raw.toFixed(4)}`,
          }},
        },
      },
    });
    if (scope) {
      scope.addEventListener("change", () => {
        bars.data.datasets = datasets();
        bars.update();
      });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
