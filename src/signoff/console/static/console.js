/* Signoff console: keyboard shortcuts, the lease countdown, decision confirmation, and
   live updates (Server-Sent Events with a slow poll as a fallback). No other host is
   contacted; every state change is a form the server checks. */
(function () {
  "use strict";

  var POLL_MS = 30000;
  var pageKind = document.body.getAttribute("data-page");

  function $(selector, root) { return (root || document).querySelector(selector); }
  function $all(selector, root) { return Array.prototype.slice.call((root || document).querySelectorAll(selector)); }

  function typing(target) {
    if (!target || !target.tagName) return false;
    var tag = target.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }

  function visible(el) {
    return !!el && !el.disabled && !el.closest("[hidden]") && el.offsetParent !== null;
  }

  function pressKey(key) {
    var buttons = $all('[data-key="' + key + '"]').filter(visible);
    if (buttons.length) { buttons[0].click(); return true; }
    return false;
  }

  function clock(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    var m = Math.floor(seconds / 60), s = seconds % 60;
    if (m >= 60) { return Math.floor(m / 60) + " h " + (m % 60) + " min"; }
    return m + ":" + (s < 10 ? "0" : "") + s;
  }

  /* Keyboard ------------------------------------------------------------------------ */

  function rows() { return $all("#rows tr[data-task-id]"); }

  function select(delta) {
    var list = rows();
    if (!list.length) return;
    var current = list.findIndex(function (r) { return r.classList.contains("selected"); });
    var next = current < 0 ? 0 : Math.min(list.length - 1, Math.max(0, current + delta));
    list.forEach(function (r) { r.classList.remove("selected"); r.removeAttribute("aria-selected"); });
    list[next].classList.add("selected");
    list[next].setAttribute("aria-selected", "true");
    var link = $(".row-link", list[next]);
    if (link) link.focus();
  }

  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !event.altKey) {
      if (sendChosen()) event.preventDefault();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var dialog = $("#shortcuts");
    if ($("dialog[open]")) return;  // a dialog handles its own keys (Esc closes it)
    if (event.key === "Escape") {
      var confirmed = cancelConfirm();
      var cancelled = cancelPending() || confirmed;
      if (typing(event.target)) {
        // Leave the field: the shortcut keys work again, from the Decision panel.
        event.target.blur();
        var heading = $("#decision-h");
        if (heading && event.target.closest("#task-body")) heading.focus({ preventScroll: true });
        cancelled = true;
      }
      if (cancelled) event.preventDefault();
      return;
    }
    if (event.key === "Enter" && !event.shiftKey && event.target.id === "notes" && pendingChoice()) {
      sendChosen();
      event.preventDefault();
      return;
    }
    if (typing(event.target)) return;
    if (dialog && dialog.open) return;
    var key = event.key;
    if (key === "?") { if (dialog) dialog.showModal(); event.preventDefault(); return; }
    if (key === "/") {
      var filter = $("[data-filter]");  // the inbox's search box
      if (filter) { filter.focus(); event.preventDefault(); }
      return;
    }
    if (key === "j") { select(1); event.preventDefault(); return; }
    if (key === "k") { select(-1); event.preventDefault(); return; }
    if (key === "Enter") {
      var pending = $("#confirm:not([hidden]) [data-confirm]");
      if (pending && event.target.tagName !== "BUTTON") { pending.click(); event.preventDefault(); return; }
      var chosen = $("#rows tr.selected");
      if (chosen && event.target.tagName !== "A" && event.target.tagName !== "BUTTON") {
        window.location.href = chosen.getAttribute("data-href");
        event.preventDefault();
      }
      return;
    }
    // Any other letter presses the visible button that names it (data-key): the page
    // carries the keys, from the decision table and its own buttons.
    if (/^[a-z]$/.test(key) && pressKey(key)) event.preventDefault();
  });

  document.addEventListener("click", function (event) {
    var opener = event.target.closest("[data-shortcuts-open]");
    if (opener) { var d = $("#shortcuts"); if (d) d.showModal(); }
    var asks = event.target.closest("[data-open-dialog]");
    if (asks) { var ask = document.getElementById(asks.getAttribute("data-open-dialog")); if (ask) ask.showModal(); }
    var closer = event.target.closest("[data-close-dialog]");
    if (closer) { closer.closest("dialog").close(); }
    var row = event.target.closest("#rows tr[data-task-id]");
    if (row && !event.target.closest("a, button, input, label")) {
      window.location.href = row.getAttribute("data-href");
    }
  });

  /* Decisions: validated, then confirmed once ----------------------------------------- */

  function cancelConfirm() {
    var bar = $("#confirm");
    if (!bar || bar.hidden) return false;
    bar.hidden = true;
    var form = $("#decide") || $("#vote");
    if (form) form.removeAttribute("data-choice");
    return true;
  }

  /* A decision that needs notes, chosen before any were typed: the notes field has the
     focus, and Enter (or Ctrl+Enter) there confirms it once notes are typed. */
  function pendingChoice() {
    var form = $("#decide");
    return form && form.getAttribute("data-pending");
  }

  function cancelPending() {
    var form = $("#decide");
    if (!form || !form.getAttribute("data-pending")) return false;
    form.removeAttribute("data-pending");
    var hint = $("#notes-pending"); if (hint) { hint.hidden = true; hint.textContent = ""; }
    var error = $("#decide-error"); if (error) error.textContent = "";
    return true;
  }

  function button(decision) {
    return $('#decide [data-decision="' + decision + '"]');
  }

  /* What stops a decision now, said in words (and the field to fix focused); "" if none. */
  function problem(form, submitter) {
    var notes = $("#notes", form).value.trim();
    var payload = $("#payload", form).value.trim();
    $("#payload-error").textContent = "";
    if (submitter.disabled) return "The decision buttons are locked: " +
      ($("#task-body").getAttribute("data-lapsed") ? "your lease lapsed. Extend the lease or claim the task again." :
       "read the changes first.");
    if (submitter.getAttribute("data-notes-required") && !notes) {
      $("#notes", form).focus();
      return "Notes are required to " + submitter.getAttribute("data-notes-required") + ".";
    }
    if (payload) {
      try { JSON.parse(payload); } catch (e) {
        $("#payload-error").textContent = "The resolution payload is not valid JSON: " + e.message;
        var details = $("details.payload", form); if (details) details.open = true;
        $("#payload", form).focus();
        return "Correct the resolution payload first.";
      }
    }
    return "";
  }

  function keyList() {
    return $all("#decide [data-decision]").map(function (b) { return b.getAttribute("data-key"); }).join(", ");
  }

  /* Ctrl+Enter (or Cmd+Enter), and Enter in the notes after choosing a decision that
     needs them: send the chosen decision. True when the keys were for this. */
  function sendChosen() {
    var form = $("#decide");
    if (!form) return false;
    var error = $("#decide-error");
    var choice = form.getAttribute("data-choice") || form.getAttribute("data-pending");
    if (!choice) {
      error.textContent = "Choose a decision first: press Esc to leave the field, then one of " +
        keyList() + " (or click its button).";
      return true;
    }
    var chosen = button(choice);
    if (!chosen) return true;
    var why = problem(form, chosen);
    if (why) { error.textContent = why; return true; }
    send(choice);
    return true;
  }

  function send(choice) {
    var form = $("#decide");
    var hidden = $('input[type="hidden"][name="decision"]', form);
    hidden.disabled = false;
    hidden.value = choice;
    $("#confirm").hidden = true;
    form.removeAttribute("data-pending");
    var toggle = $("#next-toggle");
    if (toggle) localStorage.setItem("signoff.next", toggle.checked ? "on" : "off");
    htmx.trigger(form, "confirmed");
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.id !== "decide") return;
    event.preventDefault();
    var submitter = event.submitter;
    var decision = submitter && submitter.getAttribute("data-decision");
    if (!decision) return;
    var error = $("#decide-error");
    cancelPending();
    cancelConfirm();
    error.textContent = "";
    var why = problem(form, submitter);
    if (why) {
      error.textContent = why;
      if (submitter.getAttribute("data-notes-required") && !$("#notes", form).value.trim()) {
        form.setAttribute("data-pending", decision);
        var hint = $("#notes-pending");
        hint.textContent = submitter.getAttribute("data-label") + ": type your notes here (" +
          submitter.getAttribute("data-notes-hint") + "), then press Enter to confirm. Esc cancels.";
        hint.hidden = false;
      }
      return;
    }
    form.setAttribute("data-choice", decision);
    $("#confirm-text").textContent = submitter.getAttribute("data-confirm-text") +
      " Press Enter or click Confirm; Esc cancels.";
    $("#confirm").hidden = false;
    $("#confirm [data-confirm]").focus();
  }, true);

  /* A vote: the same one confirmation, which says when this vote decides the task. */
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.id !== "vote") return;
    event.preventDefault();
    var submitter = event.submitter;
    var decision = submitter && submitter.getAttribute("data-vote");
    if (!decision) return;
    var error = $("#vote-error");
    error.textContent = "";
    cancelConfirm();
    if (submitter.getAttribute("data-notes-required") && !$("#vote-notes", form).value.trim()) {
      error.textContent = "Notes are required to " + submitter.getAttribute("data-notes-required") + ".";
      $("#vote-notes", form).focus();
      return;
    }
    form.setAttribute("data-choice", decision);
    $("#confirm-text").textContent = submitter.getAttribute("data-confirm-text") +
      " Press Enter or click Confirm; Esc cancels.";
    $("#confirm").hidden = false;
    $("#confirm [data-confirm]").focus();
  }, true);

  function sendVote(form) {
    var choice = form.getAttribute("data-choice");
    if (!choice) return;
    var hidden = $('input[type="hidden"][name="decision"]', form);
    hidden.disabled = false;
    hidden.value = choice;
    $("#confirm").hidden = true;
    htmx.trigger(form, "confirmed");
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-cancel]")) { cancelConfirm(); return; }
    var voting = event.target.closest("#vote [data-confirm]");
    if (voting) { sendVote($("#vote")); return; }
    if (event.target.closest("[data-confirm]")) {
      var form = $("#decide");
      var choice = form && form.getAttribute("data-choice");
      if (!choice) return;
      send(choice);
      return;
    }
    if (event.target.closest("[data-unlock]")) {
      $all("#decide [data-decision]").forEach(function (b) { b.disabled = false; });
      var lock = $("#revision-lock"); if (lock) lock.remove();
      var first = $("#decide [data-decision]"); if (first) first.focus();
    }
  });

  /* Unsent notes: kept in this browser tab (sessionStorage) by task and revision, so a
     reload, a lapse or a supervisor's force release never loses them; cleared once a
     decision on the task is recorded. */

  var DRAFT = "signoff.draft.";

  function draftKey(body) {
    return DRAFT + body.getAttribute("data-task-id") + "@" + (body.getAttribute("data-revision") || "");
  }

  function storage() {
    try { return window.sessionStorage; } catch (e) { return null; }
  }

  function readDraft(body) {
    var store = storage();
    var raw = store && store.getItem(draftKey(body));
    if (!raw) return null;
    try { return JSON.parse(raw); } catch (e) { return null; }
  }

  function keepDraft() {
    var body = $("#task-body"), form = $("#decide"), store = storage();
    if (!body || !form || !store) return;
    var notes = $("#notes", form).value, payload = $("#payload", form).value;
    if (notes || payload) store.setItem(draftKey(body), JSON.stringify({ notes: notes, payload: payload }));
    else store.removeItem(draftKey(body));
  }

  function forgetDrafts(taskId) {
    var store = storage();
    if (!store) return;
    var prefix = DRAFT + taskId + "@";
    for (var i = store.length - 1; i >= 0; i--) {
      var key = store.key(i);
      if (key && key.indexOf(prefix) === 0) store.removeItem(key);
    }
  }

  document.addEventListener("input", function (event) {
    if (event.target.closest && event.target.closest("#decide")) keepDraft();
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    var elt = event.detail.elt;
    var status = event.detail.xhr && event.detail.xhr.status;
    if (elt && elt.id === "decide" && status >= 200 && status < 300) {
      var body = $("#task-body");
      if (body) forgetDrafts(body.getAttribute("data-task-id"));
    }
  });

  function showDraft(body) {
    var status = body.getAttribute("data-status");
    if (status !== "PENDING_REVIEW" && status !== "CLAIMED") {
      forgetDrafts(body.getAttribute("data-task-id"));  // decided (or withdrawn): done with
      return;
    }
    var draft = readDraft(body);
    if (!draft) return;
    var notes = $("#notes", body), payload = $("#payload", body);
    if (notes && !notes.value) notes.value = draft.notes || "";
    if (payload && !payload.value) payload.value = draft.payload || "";
    var kept = $("#draft-kept", body);
    if (kept && draft.notes) {
      $("#draft-kept-text", kept).textContent = draft.notes;
      kept.hidden = false;
    }
  }

  /* Lease countdown ----------------------------------------------------------------- */

  var leaseTimer = null;

  /* The warning counts down every second where it is seen; a screen reader hears it when
     it starts and as it passes each whole minute, 0:30 and 0:10, not every second. */
  function marks(warn) {
    var list = [];
    for (var m = Math.floor(warn / 60) * 60; m >= 60; m -= 60) if (m < warn) list.push(m);
    return list.concat([30, 10].filter(function (m) { return m < warn; }));
  }

  function startLease(body) {
    if (leaseTimer) { clearInterval(leaseTimer); leaseTimer = null; }
    var left = parseFloat(body.getAttribute("data-lease-left"));
    if (isNaN(left)) return;
    var warn = parseFloat(body.getAttribute("data-warn") || "120");
    var started = performance.now();
    var pending = marks(warn);
    var warned = false;
    function warning(seconds) {
      return "Your lease lapses in " + clock(seconds) + ". Press e (Extend lease) to keep it.";
    }
    function tick() {
      var remaining = left - (performance.now() - started) / 1000;
      var timer = $("#lease-timer");
      if (!timer) { clearInterval(leaseTimer); return; }
      if (remaining <= 0) {
        timer.textContent = "lapsed";
        lockForLapse();
        clearInterval(leaseTimer);
        return;
      }
      timer.textContent = clock(remaining) + " left";
      if (remaining > warn) return;
      $("#lease-warning").textContent = warning(remaining);
      var announce = $("#lease-announce");
      if (!warned) {
        warned = true;
        pending = pending.filter(function (m) { return m < remaining; });
        if (announce) announce.textContent = warning(remaining);
      } else if (pending.length && remaining <= pending[0]) {
        if (announce) announce.textContent = warning(pending[0]);
        pending = pending.filter(function (m) { return m < remaining; });
      }
    }
    tick();
    leaseTimer = setInterval(tick, 1000);
  }

  function lockForLapse() {
    $all("#decide [data-decision]").forEach(function (b) { b.disabled = true; });
    cancelConfirm();
    cancelPending();
    var body = $("#task-body");
    if (body) body.setAttribute("data-lapsed", "1");
    // What was true while the lease held is no longer: "Lease extended.", "claimed".
    $all("#notices .notice.ok").forEach(function (n) { n.remove(); });
    $all(".meta .status.s-claimed").forEach(function (label) {
      label.classList.remove("s-claimed");
      label.classList.add("s-lapsed");
      label.textContent = "lease lapsed";
    });
    var text = "Your lease lapsed: the decision buttons are locked. Extend the lease or claim the task again." +
      " Your notes stay here.";
    $("#lease-warning").textContent = text;
    var announce = $("#lease-announce"); if (announce) announce.textContent = text;
    var reclaim = $("#reclaim"); if (reclaim) reclaim.hidden = false;
  }

  /* Live updates -------------------------------------------------------------------- */

  var saved = null;

  var inFlight = 0;
  document.addEventListener("htmx:beforeRequest", function () { inFlight += 1; });
  document.addEventListener("htmx:afterRequest", function () { inFlight = Math.max(0, inFlight - 1); });

  document.addEventListener("htmx:beforeSwap", function (event) {
    // A refusal answers with its status (403, 409, 422) and the task as it is now, with
    // the reason as a notice: show it like any other answer. Any other error answer (a
    // stale form token, a task that is gone) leaves the page as it is.
    var status = event.detail.xhr && event.detail.xhr.status;
    var body = event.detail.xhr && event.detail.xhr.responseText;
    if (status >= 400 && status < 500 && event.detail.target && event.detail.target.id === "task-body" &&
        body && /id="task-body"/.test(body)) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
    // Never let an older picture of the task replace a newer one (a refresh that was
    // under way while the reviewer's own action answered).
    var current = $("#task-body");
    var text = event.detail.xhr && event.detail.xhr.responseText;
    var match = text && /id="task-body"[^>]*data-version="(\d+)"/.exec(text);
    if (current && match && event.detail.requestConfig && event.detail.requestConfig.verb === "get" &&
        Number(match[1]) <= Number(current.getAttribute("data-version"))) {
      event.detail.shouldSwap = false;
      return;
    }
    var form = $("#decide");
    if (form && event.detail.target && event.detail.target.id === "task-body") {
      saved = { notes: $("#notes", form).value, payload: $("#payload", form).value,
                task: $("#task-body").getAttribute("data-task-id") };
    }
  });

  function restoreDraft(body) {
    if (!saved || saved.task !== body.getAttribute("data-task-id")) return;
    var notes = $("#notes", body), payload = $("#payload", body);
    if (notes && !notes.value) notes.value = saved.notes;
    if (payload && !payload.value) payload.value = saved.payload;
    saved = null;
  }

  function checkTask() {
    var body = $("#task-body");
    if (!body || checkTask.busy) return;
    if (inFlight > 0) { setTimeout(checkTask, 300); return; }  // the answer will show it
    var id = body.getAttribute("data-task-id");
    checkTask.busy = true;
    fetch("/console/tasks/" + id + "/state", { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (state) {
        body = $("#task-body");  // an answer to the reviewer's own action may have replaced it
        if (!state || !body || state.version <= Number(body.getAttribute("data-version"))) return;
        var params = new URLSearchParams(body.getAttribute("data-nav") || "");
        params.set("since", body.getAttribute("data-version"));
        if (body.getAttribute("data-revision")) params.set("seen", body.getAttribute("data-revision"));
        return htmx.ajax("GET", "/console/tasks/" + id + "?" + params.toString(),
                         { target: "#task-body", swap: "outerHTML" });
      })
      .catch(function () {})
      .then(function () { checkTask.busy = false; });
  }

  /* The "N new" pill asks how many tasks of this view (filters and search applied) were
     escalated since the page was shown: it keeps counting whether the view holds ten
     tasks or ten thousand, on whatever page the reviewer is. */
  function checkInbox() {
    var pill = $("#new-pill");
    if (!pill || checkInbox.busy) return;
    checkInbox.busy = true;
    fetch(pill.getAttribute("data-new-url"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (answer) {
        if (!answer || !(answer["new"] > 0)) return;
        pill.textContent = answer["new"] + " new — show";
        pill.hidden = false;
      })
      .catch(function () {})
      .then(function () { checkInbox.busy = false; });
  }

  /* Showing them: the same page of the view again (its rows, counts and pages), read
     fresh; the keyboard goes on from the first row. */
  document.addEventListener("click", function (event) {
    var pill = event.target.closest("#new-pill");
    if (!pill) return;
    fetch(window.location.pathname + window.location.search, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        var main = $("#main");
        if (!fresh || !main) return;
        main.innerHTML = fresh.innerHTML;
        htmx.process(main);
        startRowCountdowns();
        var first = $("#rows .row-link") || $("#showing");
        if (first) first.focus();
      })
      .catch(function () {});
  });

  function check() {
    if (pageKind === "task") checkTask();
    else if (pageKind === "inbox") checkInbox();
  }

  if (pageKind === "task" || pageKind === "inbox") {
    if (window.EventSource) {
      var source = new EventSource("/console/events");
      source.addEventListener("change", check);
    }
    setInterval(check, POLL_MS);
  }

  /* Row countdowns (Mine) ----------------------------------------------------------- */

  var rowTimer = null;
  function startRowCountdowns() {
    if (rowTimer) clearInterval(rowTimer);
    var items = $all("[data-countdown]");
    if (!items.length) return;
    var started = performance.now();
    rowTimer = setInterval(function () {
      var elapsed = (performance.now() - started) / 1000;
      items.forEach(function (el) {
        var left = parseFloat(el.getAttribute("data-countdown")) - elapsed;
        el.textContent = left > 0 ? "lease " + clock(left) + " left" : "lease lapsed";
      });
    }, 1000);
  }

  /* Wiring -------------------------------------------------------------------------- */

  /* Bars: their widths come as data (the page's policy allows no inline style). */

  function drawBars(root) {
    $all("[data-width]", root).forEach(function (el) {
      el.style.width = parseFloat(el.getAttribute("data-width")) + "%";
    });
    $all("[data-left]", root).forEach(function (el) {
      el.style.left = parseFloat(el.getAttribute("data-left")) + "%";
    });
  }

  /* "Viewed": recorded only once the reviewer acts on the page (a click or a key), so a
     page opened by another site records nothing. */

  var viewedSent = {};
  function recordViewed() {
    var body = $("#task-body");
    var revision = body && body.getAttribute("data-revision");
    if (!revision) return;
    var key = body.getAttribute("data-task-id") + "@" + revision;
    if (viewedSent[key]) return;
    viewedSent[key] = true;
    var token = JSON.parse(body.getAttribute("hx-headers") || "{}")["X-CSRF-Token"] || "";
    fetch("/console/tasks/" + body.getAttribute("data-task-id") + "/viewed", {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRF-Token": token, "Content-Type": "application/x-www-form-urlencoded" },
      body: "revision=" + encodeURIComponent(revision)
    });
  }
  document.addEventListener("pointerdown", function (event) {
    if (event.isTrusted) recordViewed();
  }, true);
  document.addEventListener("keydown", function (event) {
    if (event.isTrusted) recordViewed();
  }, true);

  function init(root) {
    drawBars(root);
    var body = root.id === "task-body" ? root : $("#task-body", root);
    if (body) {
      // A claim, an extension or a live refresh replaces the task's part of the page; the
      // keyboard then starts again from the Decision panel, not from the top of the page.
      if (root === body && (!document.activeElement || document.activeElement === document.body)) {
        // A refused edit: the first field it names, to correct (Esc leaves it for the keys).
        var refused = $('.edits [aria-invalid="true"]', body);
        var heading = refused || $("#decision-h", body);
        if (heading) heading.focus({ preventScroll: !refused });
      }
      startLease(body);
      restoreDraft(body);
      showDraft(body);
      var toggle = $("#next-toggle", body);
      if (toggle) toggle.checked = localStorage.getItem("signoff.next") !== "off";
    }
    if ($("[data-countdown]", root)) startRowCountdowns();
  }

  htmx.onLoad(init);
})();
