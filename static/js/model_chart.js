// The model page's chart: Ra, Rh and R over the model's evaluations in one context at a time
// (as Fig. 6 of the LLMChain paper), from the #rep-history json_script. The tables above carry
// the same numbers, so without JavaScript (or Chart.js) the page still says everything.
(function () {
  "use strict";

  const SERIES = [
    {key: "r", label: "R", color: "#14213d", width: 2.5},
    {key: "ra", label: "Ra (automatic)", color: "#2a5db0", width: 1.5, dash: [6, 3]},
    {key: "rh", label: "Rh (human)", color: "#d9822b", width: 1.5, dash: [2, 2]},
  ];

  function datasets(context) {
    return SERIES.map((s) => ({
      key: s.key,
      label: s.label,
      data: context.i.map((x, k) => ({x: x, y: context[s.key][k]})),
      borderColor: s.color,
      backgroundColor: s.color,
      borderWidth: s.width,
      borderDash: s.dash || [],
      pointRadius: context.i.length > 40 ? 0 : 2.5,
      pointHoverRadius: 4,
      tension: 0,
    }));
  }

  function draw() {
    const source = document.getElementById("rep-history");
    const section = document.getElementById("rep-chart");
    if (!source || !section || typeof window.Chart === "undefined") return;
    const contexts = JSON.parse(source.textContent).contexts || [];
    if (!contexts.length) return;

    const select = document.getElementById("rep-chart-context");
    contexts.forEach((c, k) => {
      const option = document.createElement("option");
      option.value = String(k);
      const n = c.i[c.i.length - 1];
      option.textContent = `${c.name} (${n} update${n === 1 ? "" : "s"})`;
      select.appendChild(option);
    });
    section.hidden = false;

    const reduceMotion = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
    const canvas = document.getElementById("rep-chart-canvas");
    const chart = new window.Chart(canvas, {
      type: "line",
      data: {datasets: datasets(contexts[0])},
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: reduceMotion ? false : {duration: 250},
        parsing: false,
        interaction: {mode: "nearest", axis: "x", intersect: false},
        scales: {
          x: {type: "linear", title: {display: true, text: "evaluation (reputation update)"},
              ticks: {precision: 0}},
          y: {min: 0, max: 1, title: {display: true, text: "reputation"}},
        },
        plugins: {
          legend: {position: "bottom", labels: {usePointStyle: true, pointStyle: "line"}},
          tooltip: {callbacks: {
            title: (items) => items.length ? `evaluation ${items[0].parsed.x}` : "",
            label: (item) => `${item.dataset.label}: ${item.parsed.y.toFixed(4)}`,
          }},
        },
      },
    });
    const label = canvas.getAttribute("aria-label");
    const show = (context) => {
      canvas.setAttribute("data-context", context.id);
      canvas.setAttribute("aria-label", `${label} in ${context.name}`);
    };
    show(contexts[0]);

    select.addEventListener("change", () => {
      const context = contexts[Number(select.value)];
      chart.data.datasets = datasets(context);
      chart.update();
      show(context);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
