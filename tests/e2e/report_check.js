// What a person would see on a kbrun report page, measured in the page by
// headless Chromium (tests/e2e/report_pages.sh injects this script and reads
// the lines it appends to <pre id="kb-check"> from `chromium --dump-dom`).
//
// Per plot (<svg> with an axis): each axis has a title, its unit (the last
// "(...)") turns every tick label into the value the tick stands for
// (data-value, in the data's unit: seconds for durations), tick labels are
// plain numbers, no two texts overlap, no text sticks out of the plot, a
// KDE curve stays under the top of its y axis, a legend covers no data
// point, one outlying point does not flatten the others against the axis,
// and plots with the same title on a page share their y ticks.
// Per page: its height and width at a 1280 px window.
(function () {
  "use strict";
  var lines = [];
  var problems = 0;
  function problem(where, what) { problems++; lines.push("KBPROBLEM " + where + ": " + what); }
  var UNITS = { "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600 };
  var TIME_WORDS = /\b(seconds?|secs?|minutes?|millis(econds)?|hours?)\b/i;
  function plainNumber(t) {
    var m = t.trim().match(/^(-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?)([kMG]?)$/);
    if (!m) return null;
    return parseFloat(m[1]) * { "": 1, k: 1e3, M: 1e6, G: 1e9 }[m[2]];
  }
  function overlap(a, b, slack) {
    return Math.min(a.right, b.right) - Math.max(a.left, b.left) > slack &&
      Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > slack;
  }
  var yticksByTitle = {};
  var plots = 0;
  var svgs = document.querySelectorAll("svg");
  for (var i = 0; i < svgs.length; i++) {
    var svg = svgs[i];
    var name = (svg.getAttribute("aria-label") || "svg") + " #" + (i + 1);
    var box = svg.getBoundingClientRect();
    var axes = svg.querySelectorAll("g.x-axis, g.y-axis");
    if (axes.length > 0) plots++;
    lines.push("KBPLOT " + Math.round(box.top + window.scrollY) + " " + name);
    var yticks = [];
    for (var a = 0; a < axes.length; a++) {
      var g = axes[a];
      var which = g.getAttribute("class");
      var title = g.querySelector("text.axis-title");
      var ticks = g.querySelectorAll("text.tick");
      if (!title) { problem(name, which + " has no title"); continue; }
      var tt = title.textContent;
      var um = tt.match(/\(([^()]+)\)\s*$/);
      var unit = um ? um[1] : null;
      if (!unit && TIME_WORDS.test(tt)) problem(name, which + " title '" + tt + "' names a time unit outside parentheses");
      var factor = unit && UNITS[unit] !== undefined ? UNITS[unit] : 1;
      for (var k = 0; k < ticks.length; k++) {
        var label = ticks[k].textContent;
        var n = plainNumber(label);
        var v = parseFloat(ticks[k].getAttribute("data-value"));
        if (which === "y-axis") yticks.push(label);
        if (n === null) { problem(name, which + " tick '" + label + "' is not a plain number (the unit belongs in the title '" + tt + "')"); continue; }
        if (isNaN(v)) { problem(name, which + " tick '" + label + "' has no data-value"); continue; }
        var shown = n * factor;
        var tol = Math.max(Math.abs(v) * 0.006, 1e-12);
        if (Math.abs(shown - v) > tol) problem(name, which + " tick '" + label + "' under title '" + tt + "' reads " + shown + " but stands for " + v);
      }
    }
    if (axes.length > 0) {
      var key = svg.getAttribute("aria-label");
      if (yticksByTitle[key] === undefined) yticksByTitle[key] = yticks.join("|");
      else if (yticksByTitle[key] !== yticks.join("|")) problem(name, "same title as an earlier plot but another y scale (" + yticks.join(", ") + " vs " + yticksByTitle[key].split("|").join(", ") + ")");
    }
    // texts: none overlapping another, none outside the plot
    var texts = svg.querySelectorAll("text");
    var rects = [];
    for (var t = 0; t < texts.length; t++) {
      var r = texts[t].getBoundingClientRect();
      if (texts[t].textContent.trim() === "") continue;
      if (r.width < 0.5 || r.height < 0.5) { problem(name, "text '" + texts[t].textContent + "' has no size (no font installed?)"); continue; }
      rects.push({ r: r, s: texts[t].textContent });
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
        problem(name, "text '" + texts[t].textContent + "' sticks out of the plot");
    }
    for (var p = 0; p < rects.length; p++)
      for (var q = p + 1; q < rects.length; q++)
        if (overlap(rects[p].r, rects[q].r, 1)) problem(name, "text '" + rects[p].s + "' overlaps '" + rects[q].s + "'");
    // the KDE under the top of the y axis
    var yline = svg.querySelector("g.y-axis > line:last-of-type");
    var kde = svg.querySelector("path.kde");
    if (kde && yline) {
      var top = yline.getBoundingClientRect().top;
      if (kde.getBoundingClientRect().top <= top + 0.5) problem(name, "the KDE is cut at the top of the y axis");
    }
    // legend over data
    var legends = svg.querySelectorAll("g.legend");
    var dots = svg.querySelectorAll("g.series circle, g.series path");
    for (var l = 0; l < legends.length; l++) {
      var lr = legends[l].getBoundingClientRect();
      for (var d = 0; d < dots.length; d++)
        if (overlap(lr, dots[d].getBoundingClientRect(), 0.5)) { problem(name, "the legend covers data"); break; }
    }
    // one point far from the rest flattens them (a linear axis over levels
    // a hundred times apart)
    var circles = svg.querySelectorAll("g.series circle");
    if (circles.length >= 4 && yline) {
      var lb = yline.getBoundingClientRect();
      var ys = [];
      for (var c = 0; c < circles.length; c++) { var cr = circles[c].getBoundingClientRect(); ys.push(cr.top + cr.height / 2); }
      ys.sort(function (x, y) { return x - y; });
      var h = lb.height || 1;
      var restSpread = ys[ys.length - 1] - ys[1];
      if ((ys[1] - ys[0]) / h > 0.6 && restSpread / h < 0.06)
        problem(name, "one point far above the rest flattens them (" + ys.length + " points; the rest within " + Math.round(restSpread) + " px)");
    }
  }
  var sections = document.querySelectorAll("section");
  for (var si = 0; si < sections.length; si++) {
    var sr = sections[si].getBoundingClientRect();
    var h2 = sections[si].querySelector("h2");
    lines.push("KBSECTION " + Math.round(sr.top + window.scrollY) + " " + Math.round(sr.height) + " " + (h2 ? h2.textContent : sections[si].id));
    // tables and plots stay inside their section's frame
    var inner = sections[si].querySelectorAll("table, figure");
    for (var ti = 0; ti < inner.length; ti++) {
      var ir = inner[ti].getBoundingClientRect();
      if (ir.width > 0 && ir.right > sr.right + 1)
        problem("section " + (h2 ? h2.textContent : si), inner[ti].tagName.toLowerCase() + " sticks out of the section by " + Math.round(ir.right - sr.right) + " px");
    }
  }
  var verdict = document.querySelector("header p.verdict");
  lines.push("KBVERDICT " + (verdict ? verdict.textContent : ""));
  var first = document.querySelector("header h1");
  if (verdict && first && first.nextElementSibling !== verdict) problem("page", "the verdict is not the first thing under the title");
  lines.push("KBPAGE height=" + document.documentElement.scrollHeight + " width=" + document.documentElement.scrollWidth +
    " plots=" + plots + " svgs=" + svgs.length + " problems=" + problems);
  var pre = document.createElement("pre");
  pre.id = "kb-check";
  pre.textContent = "\n" + lines.join("\n") + "\n";
  document.body.appendChild(pre);
})();
