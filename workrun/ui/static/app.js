// Live updates (R-U3): re-fetch this page's changing part every 0.5 s and swap it in when it changed.
// No reload, no inline script (CSP). A form being filled in is never replaced under the user.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || live.getAttribute("data-poll") !== "1") { return; }
  var busy = false;
  var last = null;
  function editing() {
    var a = document.activeElement;
    return a && live.contains(a) && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT");
  }
  function tick() {
    if (busy || document.hidden) { return; }
    busy = true;
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    url.hash = "";
    fetch(url.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null || html === last || editing()) { return; }
        var open = [];
        live.querySelectorAll("details[id]").forEach(function (d) { open.push([d.id, d.open]); });
        live.innerHTML = html;  // server-rendered, every journal text escaped
        open.forEach(function (p) { var d = document.getElementById(p[0]); if (d) { d.open = p[1]; } });
        last = html;
        live.setAttribute("data-updated", String(Date.now()));
      })
      .catch(function () {})
      .then(function () { busy = false; });
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
