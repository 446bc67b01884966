// A wallet the user holds, through the browser's standard wallet interface (EIP-1193: window.ethereum).
//
// Linking (the account page): the wallet gives its address (eth_requestAccounts), the site issues a
// sign-in message (EIP-4361) for it, the wallet signs it (personal_sign), the site checks it.
//
// Rating (the questionnaire of an answer recorded under the wallet): before the form is sent, the
// site prepares the humEval request, the wallet signs its typed data (eth_signTypedData_v4), and
// the form goes with the signed request. If the wallet refuses, nothing is sent and the page says so.
(function () {
  "use strict";

  function csrf() {
    var match = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var headers = document.body.getAttribute("hx-headers");
    try { return JSON.parse(headers)["X-CSRFToken"]; } catch (e) { return ""; }
  }

  function say(box, text) {
    if (!box) return;
    box.textContent = text;
    box.hidden = !text;
  }

  function errorsOf(body) {
    var errors = (body && body.errors) || {};
    return Object.keys(errors).map(function (k) { return errors[k].join(" "); }).join(" ") || "The site refused the request.";
  }

  async function post(url, data) {
    var response = await fetch(url, { method: "POST", body: data, credentials: "same-origin",
                                      headers: { "X-CSRFToken": csrf() } });
    var body = {};
    try { body = await response.json(); } catch (e) { /* not JSON: an error page */ }
    return { ok: response.ok, status: response.status, body: body };
  }

  function refused(error) {
    return error && (error.code === 4001 || /reject|denied|refus/i.test(String(error.message || "")));
  }

  function hex(text) {
    return "0x" + Array.from(new TextEncoder().encode(text)).map(function (b) {
      return b.toString(16).padStart(2, "0");
    }).join("");
  }

  // -- a rating or an arena vote: sign before sending -----------------------------------------------
  function what(form) {
    return form.classList.contains("vote") ? "the vote" : "the rating";
  }

  async function signRating(form, box, submitter) {
    var wallet = window.ethereum;
    if (!wallet) {
      say(box, "No wallet was found in this browser, so " + what(form) + " was not sent: open this page where your wallet is, then send it again.");
      return null;
    }
    say(box, "Preparing what your wallet will sign…");
    var prepared = await post(form.dataset.prepare, new FormData(form, submitter || undefined));
    if (!prepared.ok) return prepared.status === 400 ? "" : null; // "" : let the site show what is wrong
    say(box, "Your wallet asks you to sign " + what(form).replace("the ", "this ") + "…");
    var signature;
    try {
      signature = await wallet.request({ method: "eth_signTypedData_v4",
                                         params: [prepared.body.address, JSON.stringify(prepared.body.typedData)] });
    } catch (error) {
      say(box, refused(error)
        ? "Your wallet refused to sign, so " + what(form) + " was not sent. Send it again when you want to sign it."
        : "Your wallet could not sign (" + (error && error.message || "no reason given") + "), so " + what(form) + " was not sent.");
      return null;
    }
    var request = prepared.body.request;
    request.signature = signature;
    return JSON.stringify(request);
  }

  document.addEventListener("htmx:confirm", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.wallet) return;
    var input = form.querySelector("input[name=signed_request]");
    if (!input || input.value) return; // signed already: send
    event.preventDefault();
    var box = form.querySelector(".wallet-status");
    var trigger = event.detail.triggeringEvent;
    var submitter = trigger && trigger.submitter || null; // an arena vote: the button says which outcome
    var buttons = form.querySelectorAll("button[type=submit]");
    buttons.forEach(function (b) { b.disabled = true; });
    signRating(form, box, submitter).then(function (signed) {
      buttons.forEach(function (b) { b.disabled = false; });
      if (signed === null) return; // refused, or no wallet: nothing is sent
      input.value = signed;
      if (submitter && submitter.name) { // its value goes with the form, whatever the focus did meanwhile
        var chosen = form.querySelector('input[type=hidden][name="' + submitter.name + '"]');
        if (!chosen) {
          chosen = document.createElement("input");
          chosen.type = "hidden";
          chosen.name = submitter.name;
          form.appendChild(chosen);
        }
        chosen.value = submitter.value;
      }
      say(box, signed ? "Signed; sending…" : "");
      event.detail.issueRequest(true);
    }, function (error) {
      buttons.forEach(function (b) { b.disabled = false; });
      say(box, "The rating was not sent: " + (error && error.message || error));
    });
  });

  // -- linking a wallet ----------------------------------------------------------------------------
  async function link(button, box) {
    var wallet = window.ethereum;
    if (!wallet) {
      say(box, "No wallet was found in this browser: install or unlock one, then try again.");
      return;
    }
    var address;
    try {
      address = (await wallet.request({ method: "eth_requestAccounts" }))[0];
    } catch (error) {
      say(box, refused(error) ? "Your wallet did not share an address: nothing was linked." : "Your wallet failed: " + error.message);
      return;
    }
    var data = new FormData();
    data.append("address", address || "");
    var issued = await post(button.dataset.challenge, data);
    if (!issued.ok) { say(box, errorsOf(issued.body)); return; }
    say(box, "Your wallet asks you to sign the sign-in message…");
    var signature;
    try {
      signature = await wallet.request({ method: "personal_sign", params: [hex(issued.body.message), address] });
    } catch (error) {
      say(box, refused(error) ? "Your wallet refused to sign: nothing was linked." : "Your wallet failed: " + error.message);
      return;
    }
    var proof = new FormData();
    proof.append("message", issued.body.message);
    proof.append("signature", signature);
    var linked = await post(button.dataset.link, proof);
    if (!linked.ok) { say(box, errorsOf(linked.body)); return; }
    window.location.reload();
  }

  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element && event.target.closest("button[data-link]");
    if (!button) return;
    event.preventDefault();
    button.disabled = true;
    link(button, document.getElementById("wallet-status")).finally(function () { button.disabled = false; });
  });
})();
