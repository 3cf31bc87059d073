/// The dashboard's only assets, embedded in the binary: no build step, no CDN.
enum Assets {
    /// Light and dark palettes follow `prefers-color-scheme`. No `style` attribute anywhere: the CSP forbids
    /// inline styles, so bars and charts are SVG shapes sized by attributes and coloured by these classes.
    static let css = """
        :root { --bg: #ffffff; --fg: #1d2330; --muted: #5f6b7a; --line: #d9dee5; --panel: #f5f7fa;
          --ios: #2f6fde; --android: #2e9e5b; --web: #8a4fd6; --fail: #d2453a; --pending: #c9d1dc; --link: #1f5fc9; --bad: #b42318; }
        @media (prefers-color-scheme: dark) {
          :root { --bg: #11151c; --fg: #e5e9f0; --muted: #9aa5b4; --line: #2b323d; --panel: #1a2029;
            --ios: #6b9cf2; --android: #52c785; --web: #b995f5; --fail: #f07167; --pending: #3a4452; --link: #8db4ff; --bad: #ff8a80; }
        }
        * { box-sizing: border-box; }
        body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg); color: var(--fg); }
        header { display: flex; gap: 1.5em; align-items: center; padding: .6em 1.2em; border-bottom: 1px solid var(--line); background: var(--panel); flex-wrap: wrap; }
        header nav { display: flex; gap: 1em; }
        header .mode { margin-left: auto; color: var(--muted); font-size: 12px; }
        header .mode.act { color: var(--bad); }
        main { padding: 1em 1.2em 3em; max-width: 1280px; }
        h1 { font-size: 20px; margin: .2em 0 .8em; } h2 { font-size: 16px; margin: 1.6em 0 .5em; }
        a { color: var(--link); text-decoration: none; } a:hover { text-decoration: underline; }
        .stats { display: flex; flex-wrap: wrap; gap: .8em; }
        .stat { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: .5em .9em; min-width: 10em; }
        .stat .label { display: block; color: var(--muted); font-size: 12px; }
        .stat .value { font-size: 20px; font-variant-numeric: tabular-nums; }
        .stat.bad .value, .paused, .bad { color: var(--bad); }
        .scroll { overflow-x: auto; }
        table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
        th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid var(--line); vertical-align: top; }
        th { color: var(--muted); font-weight: 600; font-size: 12px; }
        td.num, th.num { text-align: right; }
        .export, .empty, .hint, .note { color: var(--muted); font-size: 12px; }
        form.filters { display: flex; flex-wrap: wrap; gap: .5em; align-items: end; margin-bottom: 1em; }
        form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
        input, select, button { font: inherit; color: var(--fg); background: var(--bg); border: 1px solid var(--line); border-radius: 4px; padding: .25em .5em; }
        button { cursor: pointer; background: var(--panel); }
        form.action { display: inline-flex; gap: .4em; margin: .3em .5em .3em 0; }
        pre { background: var(--panel); border: 1px solid var(--line); padding: .8em; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
        svg .ios { fill: var(--ios); } svg .android { fill: var(--android); } svg .web { fill: var(--web); } svg .fail { fill: var(--fail); }
        svg .pending { fill: var(--pending); } svg .capped { fill: var(--muted); } svg .line-ios { stroke: var(--ios); fill: none; stroke-width: 2; }
        svg .line-android { stroke: var(--android); fill: none; stroke-width: 2; } svg .line-web { stroke: var(--web); fill: none; stroke-width: 2; }
        svg .grid { stroke: var(--line); }
        svg text { fill: var(--muted); font-size: 11px; }
        .legend .ios { color: var(--ios); } .legend .android { color: var(--android); } .legend .web { color: var(--web); } .legend .fail { color: var(--fail); }
        dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .3em 1.2em; }
        dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
        .pager { margin: .8em 0; }
        .badge { display: inline-block; font-size: 11px; line-height: 1.3; padding: 0 .45em; margin: 0 .2em .1em 0; border: 1px solid var(--line); border-radius: 9px; background: var(--panel); color: var(--fg); white-space: nowrap; }
        a.badge:hover { border-color: var(--link); text-decoration: none; }
        """

    /// Live refresh: the pages marked `data-refresh` fetch themselves every few seconds and swap their
    /// `<main>`; the header's button pauses and resumes (remembered in localStorage), and a hidden tab does not
    /// poll. Without JavaScript the pages are complete; they just do not move.
    static let js = """
        (function () {
          "use strict";
          var main = document.getElementById("content");
          var button = document.getElementById("live-toggle");
          if (!main || !button) { return; }
          var seconds = parseInt(main.getAttribute("data-refresh") || "0", 10);
          if (!(seconds > 0)) { return; }
          var paused = window.localStorage && localStorage.getItem("pgpush-live-paused") === "1";
          function label() { button.textContent = paused ? "Resume live updates" : "Pause live updates"; }
          button.hidden = false; label();
          button.addEventListener("click", function () {
            paused = !paused; label();
            try { localStorage.setItem("pgpush-live-paused", paused ? "1" : "0"); } catch (e) {}
          });
          function refresh() {
            if (paused || document.hidden) { return; }
            fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
              .then(function (r) { return r.ok ? r.text() : null; })
              .then(function (text) {
                if (!text || paused) { return; }
                var next = new DOMParser().parseFromString(text, "text/html").getElementById("content");
                if (next) { main.innerHTML = next.innerHTML; main.setAttribute("data-updated", String(Date.now())); }
              })
              .catch(function () {});
          }
          window.setInterval(refresh, seconds * 1000);
        })();
        """
}
