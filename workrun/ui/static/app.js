// Live updates (R-U3): re-fetch this page's changing part every 0.5 s and swap it in when it changed.
// No reload, no inline script (CSP). R-D5: nothing is swapped while a form field of the changing part has the
// keyboard focus or holds what the user typed or chose, so a form being filled in is never replaced; focus on a
// button, link or summary is given back to the same one after a swap, so it never moves; the graph keeps its
// zoom and scroll.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var mode = live ? live.getAttribute("data-poll") : null;  // "1": the page and its counts; "nav": the counts
  if (mode !== "1" && mode !== "nav") { return; }
  var busy = false;
  var last = live.getAttribute("data-digest");  // the digest of what the page shows (its first update is a swap
                                                // only when the journal changed since the page was served)
  function changed(field) {
    if (field.type === "hidden") { return false; }
    if (field.type === "checkbox" || field.type === "radio") { return field.checked !== field.defaultChecked; }
    if (field.tagName === "SELECT") {  // untouched: as rendered (an option marked selected, else the first)
      var marked = false;
      for (var i = 0; i < field.options.length; i += 1) { marked = marked || field.options[i].defaultSelected; }
      for (var j = 0; j < field.options.length; j += 1) {
        var rendered = marked ? field.options[j].defaultSelected : (j === 0 && !field.multiple);
        if (field.options[j].selected !== rendered) { return true; }
      }
      return false;
    }
    return field.value !== field.defaultValue;
  }
  function editing() {
    var a = document.activeElement;
    if (a && live.contains(a) && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT")) {
      return true;
    }
    var fields = live.querySelectorAll("input, select, textarea");
    for (var i = 0; i < fields.length; i += 1) { if (changed(fields[i])) { return true; } }
    return false;
  }
  function key(el, text) {  // what says which button, link or summary an element is, whatever moved around it
    var form = el.form || (el.closest && el.closest("form"));
    var within = el.parentElement && el.parentElement.closest ? el.parentElement.closest("[id]") : null;
    return [el.tagName, el.id, within && live.contains(within) ? within.id : "", el.getAttribute("href"),
            el.getAttribute("name"), el.getAttribute("value"), el.getAttribute("data-zoom"),
            el.getAttribute("data-node"), form ? form.getAttribute("action") : "",
            text ? (el.textContent || "").trim() : ""].join("\u0000");
  }
  function alike(where, text) {
    return Array.prototype.filter.call(live.getElementsByTagName(where.tag), function (el) {
      return key(el, text) === (text ? where.full : where.bare);
    });
  }
  function focused() {  // the focused element of the changing part: its key and its place among those alike
    var a = document.activeElement;
    if (!a || a === live || !live.contains(a)) { return null; }
    var where = { tag: a.tagName, full: key(a, true), bare: key(a, false) };
    where.at = alike(where, true).indexOf(a);
    where.unique = alike(where, false).length === 1;  // without its text, still the only one of its kind
    return where;
  }
  function refocus(where) {  // the same element again (its text may have changed); never another one
    if (!where) { return; }
    var same = alike(where, true)[where.at];
    if (!same && where.unique) {
      var bare = alike(where, false);
      same = bare.length === 1 ? bare[0] : null;
    }
    if (same && same.focus) { same.focus({ preventScroll: true }); }
  }
  function graphState() {
    var svg = live.querySelector("svg.graph");
    var wrap = live.querySelector(".graph-wrap");
    if (!svg || !svg.getAttribute("data-width")) { return null; }
    return { width: svg.getAttribute("width"), height: svg.getAttribute("height"),
             base: svg.getAttribute("data-width"), left: wrap ? wrap.scrollLeft : 0, top: wrap ? wrap.scrollTop : 0 };
  }
  function keepGraph(state) {
    var svg = live.querySelector("svg.graph");
    var wrap = live.querySelector(".graph-wrap");
    if (!state || !svg) { return; }
    svg.setAttribute("data-width", state.base);
    svg.setAttribute("width", state.width);
    svg.setAttribute("height", state.height);
    if (wrap) { wrap.scrollLeft = state.left; wrap.scrollTop = state.top; }
  }
  var ticks = 0;
  function attention() {  // R-D2: the navigation's counts follow the journal too
    var ctrl = window.AbortController ? new AbortController() : null;
    var timer = window.setTimeout(function () { if (ctrl) { ctrl.abort(); } }, 2000);
    return fetch("/api/attention", { credentials: "same-origin", cache: "no-store",
                                     signal: ctrl ? ctrl.signal : undefined })
      .then(function (r) { if (mode === "nav") { answered(r); } return r.ok ? r.json() : null; })
      .then(function (a) {
        if (!a) { return; }
        var c = a.compensations || {};
        var counts = { "count-compensations": (c.failed || 0) + (c.blocked || 0) + (c.unknown || 0),
                       "count-tickets": (a.tickets || {}).pending || 0 };
        Object.keys(counts).forEach(function (id) {
          var el = document.getElementById(id);
          if (el && el.textContent !== String(counts[id])) {
            el.textContent = String(counts[id]);
            el.className = counts[id] ? "count" : "count count-zero";
          }
        });
      })
      .catch(function () { if (mode === "nav") { connected(false); } return null; })
      .then(function () { window.clearTimeout(timer); });
  }
  function tick() {
    if (busy || document.hidden) { return; }
    busy = true;
    ticks += 1;
    if (mode === "nav") {  // a page with nothing of the journal's to follow (an error): counts and connection
      attention().then(function () { busy = false; });
      return;
    }
    if (ticks % 2 === 0) { attention(); }
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    url.hash = "";
    var ctrl = window.AbortController ? new AbortController() : null;
    var timer = window.setTimeout(function () { if (ctrl) { ctrl.abort(); } }, 2000);
    var digest = null;
    fetch(url.toString(), { credentials: "same-origin", cache: "no-store", signal: ctrl ? ctrl.signal : undefined })
      .then(function (r) {
        answered(r);
        digest = r.headers.get("X-Workrun-Digest");
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        digest = digest || html;  // no digest given: the content itself
        if (html === null || digest === last) { paused(false); return; }
        if (editing()) { paused(true); return; }
        paused(false);
        var open = [];
        live.querySelectorAll("details[id]").forEach(function (d) { open.push([d.id, d.open]); });
        var graph = graphState();
        var where = focused();
        live.innerHTML = html;  // server-rendered, every journal text escaped
        open.forEach(function (p) { var d = document.getElementById(p[0]); if (d) { d.open = p[1]; } });
        keepGraph(graph);
        refocus(where);
        last = digest;
        live.setAttribute("data-updated", String(Date.now()));
      })
      .catch(function () { connected(false); })
      .then(function () { window.clearTimeout(timer); busy = false; });
  }
  // R-D5: while a form being filled in holds a newer page back, say so in a corner (nothing above it moves)
  var hold = null;
  function paused(on) {
    if (!on && hold) { hold.remove(); hold = null; }
    if (on && !hold) {
      hold = document.createElement("p");
      hold.id = "paused";
      hold.className = "paused";
      hold.setAttribute("role", "status");
      hold.textContent = "newer data waits while you fill in a form on this page";
      document.body.appendChild(hold);
    }
  }
  // R-D5: say "disconnected" when the server stops answering (a poll fails or takes over 2 s), and take it
  // back when it answers again; the page's content and any form being filled in stay as they are.
  var notice = null;
  var GONE = "disconnected: the dashboard's server does not answer; this page shows what it last knew";
  var ENDED = "disconnected: this page's session ended (the dashboard was restarted?); open the URL `workrun ui` " +
              "printed; this page shows what it last knew";
  function connected(ok, why) {
    var text = why || GONE;
    if (ok && notice) { notice.remove(); notice = null; }
    if (!ok && notice && notice.textContent !== text) { notice.textContent = text; }
    if (!ok && !notice) {
      notice = document.createElement("p");
      notice.id = "disconnected";
      notice.className = "flash flash-warn";
      notice.setAttribute("role", "status");
      notice.textContent = text;
      document.body.insertBefore(notice, live);
    }
  }
  // an answer: the server is there; but a session it no longer takes (401, 403: a restarted dashboard has a new
  // token) gets no answers any more either, so the page is no longer live (dashboard review)
  function answered(r) {
    if (r.status === 401 || r.status === 403) { connected(false, ENDED); return; }
    connected(r.ok || r.status < 500);
  }
  window.setInterval(tick, 500);
})();

// Safe actions (R-D4): a form with data-confirm asks before it is sent (its reason field is required by the form).
document.addEventListener("submit", function (event) {
  "use strict";
  var form = event.target;
  var question = form && form.getAttribute && form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) { event.preventDefault(); }
}, true);

// R-D6: zoom the run's graph with its buttons ("fit": the whole graph in its frame, never above its natural size);
// a click on a node, or Enter on a node reached with Tab, goes to its section.
(function () {
  "use strict";
  function zoomBy(zoom, svg) {
    var base = Number(svg.getAttribute("data-width") || svg.getAttribute("width"));
    if (!svg.getAttribute("data-width")) { svg.setAttribute("data-width", String(base)); }
    var now = Number(svg.getAttribute("width"));
    var ratio = Number(svg.getAttribute("height")) / now;
    var next;
    if (Number(zoom) === 0) {
      var wrap = svg.closest(".graph-wrap");
      var wide = wrap ? wrap.clientWidth - 4 : base;
      var high = Math.max(200, window.innerHeight * 0.8 - (wrap ? svg.getBoundingClientRect().top -
                                                                 wrap.getBoundingClientRect().top : 0) - 8);
      next = Math.max(1, Math.min(base, wide, high / ratio));
    } else {
      next = Math.max(base * 0.25, Math.min(base * 4, now * Number(zoom)));
    }
    svg.setAttribute("width", String(Math.round(next)));
    svg.setAttribute("height", String(Math.round(next * ratio)));
  }
  function open(node) {
    var sections = document.querySelectorAll("details.node-detail summary strong");
    for (var i = 0; i < sections.length; i += 1) {
      if (sections[i].textContent === node.getAttribute("data-node")) {
        var details = sections[i].closest("details");
        details.open = true;
        details.scrollIntoView({ block: "start" });
        return;
      }
    }
  }
  document.addEventListener("click", function (event) {
    var target = event.target;
    var zoom = target && target.getAttribute && target.getAttribute("data-zoom");
    var svg = document.querySelector("svg.graph");
    if (zoom !== null && zoom !== undefined && svg) { zoomBy(zoom, svg); return; }
    var node = target && target.closest && target.closest("svg.graph g.node");
    if (node) { open(node); }
  });
  document.addEventListener("keydown", function (event) {
    var node = event.target && event.target.closest && event.target.closest("svg.graph g.node");
    if (node && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); open(node); }
  });
})();
