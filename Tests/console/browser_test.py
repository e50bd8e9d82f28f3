#!/usr/bin/env python3
"""The web console in a real browser: Playwright for Python driving Debian's chromium (executable_path, no download),
against a larder-server the caller started and seeded (ConsoleBrowserTests does). Every scenario runs in this one
process and one browser. Writes what the page showed to OUT (JSON) for the caller to check against the server, saves
screenshots of each page at 1280 px and 390 px to SCREENSHOTS, and fails on any console error of the console's pages.

Environment: CONSOLE_URL, LARDER_PORT (the TCP port, for the CLI), LARDER_CLI, ADMIN_TOKEN, READ_TOKEN, SCREENSHOTS,
OUT, PROTOCOL_MD, PHOTO, CHROMIUM (default /usr/bin/chromium).
"""
import base64
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time

from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect, sync_playwright

URL = os.environ["CONSOLE_URL"].rstrip("/")
CLI = [os.environ["LARDER_CLI"], "--port", os.environ["LARDER_PORT"], "--token", os.environ["ADMIN_TOKEN"], "--json"]
SHOTS = os.environ["SCREENSHOTS"]
DEADLINE_MS = 120_000
# wait_for_function takes a function ("() => ..."), never a bare expression: Playwright evals the text once, inside
# its DevTools call, which the console's Content-Security-Policy lets through, and then calls the function; a bare
# expression is eval'd again on each poll, from the page, which the policy (no 'unsafe-eval') rightly refuses.
expect.set_options(timeout=DEADLINE_MS)
results = {"errors": []}
console_errors = []


def cli(*args):
    done = subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"larder {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def vectors():
    """The hex blocks of Protocol.md, each named by its `; vector:` comment."""
    found = []
    text = open(os.environ["PROTOCOL_MD"], encoding="utf-8").read()
    for block in re.findall(r"```hex\n(.*?)```", text, re.S):
        name, data = None, []
        for line in block.splitlines():
            code, _, comment = line.partition(";")
            if name is None and "vector:" in comment:
                name = comment.split("vector:")[1].strip()
            data += [int(h, 16) for h in code.split()]
        if name:
            found.append({"name": name, "bytes": data})
    return found


def shoot(page, name):
    for width, height in ((1280, 800), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=f"{SHOTS}/{name}-{width}.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    # The window as a reader first sees it: the top of the page (header, toolbar, column headers), wherever the
    # scenario left it scrolled.
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=f"{SHOTS}/{name}-1280-window.png")


def watch_errors(page, label):
    page.on("console", lambda m: m.type == "error" and console_errors.append(f"{label}: {m.text}"))
    page.on("pageerror", lambda e: console_errors.append(f"{label}: {e}"))


def sign_in(page, token):
    page.goto(URL + "/")
    page.fill("#token", token)
    page.click("#signin button[type=submit]")


def table_ids(page):
    return page.eval_on_selector_all("#records tbody tr", "rows => rows.map(r => r.dataset.id)")


def tab_to(page, predicate, presses=60):
    """Presses Tab until the focused element satisfies `predicate` (a function of it, run in the page)."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate(f"() => ({predicate})(document.activeElement)"):
            return True
    return False


def clipboard(page, want):
    """The clipboard's text, once it is `want` (the copy is asynchronous), or what it holds at the deadline."""
    try:
        page.wait_for_function(
            "async (want) => (await navigator.clipboard.readText()) === want", arg=want, timeout=DEADLINE_MS)
    except PlaywrightTimeout:
        pass
    return page.evaluate("() => navigator.clipboard.readText()")


# Installed in the page before an upload: the console's socket is closed right after it sends the upload's first
# chunk, and every chunk is noted as [which socket sent it, its offset], to show that the upload goes on from the
# server's offset on a new connection.
DROP_AFTER_FIRST_CHUNK = """(chunkOpcode) => {
    const send = WebSocket.prototype.send;
    const sockets = [];
    window.uploadChunks = [];
    window.restoreSend = () => { WebSocket.prototype.send = send; };
    WebSocket.prototype.send = function (data) {
      send.call(this, data);
      const bytes = new Uint8Array(data.buffer ?? data, data.byteOffset ?? 0, data.byteLength);
      if (((bytes[8] << 8) | bytes[9]) !== chunkOpcode) return;
      if (!sockets.includes(this)) sockets.push(this);
      const jsonLength = ((bytes[16] << 24) | (bytes[17] << 16) | (bytes[18] << 8) | bytes[19]) >>> 0;
      const json = (bytes[7] & 1) ? {} : JSON.parse(new TextDecoder().decode(bytes.subarray(28, 28 + jsonLength)));
      window.uploadChunks.push([sockets.indexOf(this), json.offset]);
      if (window.uploadChunks.length === 1) this.close();
    };
}"""

# Every text the upload's status line shows, in order.
WATCH_UPLOAD_STATUS = """() => {
    window.uploadSeen = [];
    const line = document.querySelector('#upload-status');
    new MutationObserver(() => window.uploadSeen.push(line.textContent))
      .observe(line, { childList: true, characterData: true, subtree: true });
}"""


def main():
    os.makedirs(SHOTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
                                    args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 800},
                                      permissions=["clipboard-read", "clipboard-write"])
        context.set_default_timeout(DEADLINE_MS)
        page = context.new_page()
        watch_errors(page, "admin")

        # larder.js against every hex vector of Protocol.md: decoded, re-encoded to the same bytes, JSON parsed.
        page.goto(URL + "/")
        results["vectors"] = page.evaluate("""async (vectors) => {
            const m = await import('/larder.js');
            const out = [];
            for (const v of vectors) {
              const bytes = new Uint8Array(v.bytes);
              const f = m.decodeFrame(bytes);
              const again = m.encodeFrame({ opcode: f.opcode, requestID: f.requestID, status: f.status, flags: f.flags,
                json: f.json, binary: f.binary, uncompressedLength: f.uncompressedLength });
              const same = again.length === bytes.length && again.every((b, i) => b === bytes[i]);
              const body = await m.frameJSON(f);
              out.push({ name: v.name, same, opcode: f.opcode, keys: Object.keys(body).length });
            }
            return out;
        }""", vectors())
        shoot(page, "signin")

        # A wrong token is refused, and said so.
        sign_in(page, "not-the-token")
        expect(page.locator("#signin-error")).to_contain_text("UNAUTHENTICATED")
        results["wrongToken"] = page.inner_text("#signin-error")

        # The admin token, with the keyboard alone: Tab reaches the token field, Enter signs in. Then collections
        # with counts, then each collection's table.
        page.goto(URL + "/")
        page.wait_for_selector("#token")
        results["tabToToken"] = tab_to(page, "e => e.id === 'token'", presses=5)
        page.keyboard.type(os.environ["ADMIN_TOKEN"])
        page.keyboard.press("Enter")
        page.wait_for_selector("#collections tbody tr")
        results["collections"] = page.eval_on_selector_all(
            "#collections tbody tr", "rows => rows.map(r => [r.cells[0].innerText, Number(r.cells[1].innerText)])")
        shoot(page, "collections")
        results["browsed"] = {}
        for name, count in results["collections"]:
            if count == 0 or name == "bulk":
                continue
            page.goto(f"{URL}/#/c/{name}")
            expect(page.locator("h2")).to_have_text(name)
            page.wait_for_selector("#records tbody tr")
            results["browsed"][name] = len(table_ids(page))
        shoot(page, "records")

        # 10,000 records: filter, sort by a column (twice: descending), and page with the keyset cursor.
        page.goto(f"{URL}/#/c/bulk")
        page.wait_for_selector("#records tbody tr")
        page.fill("#filter", "n<5000 and even=true")
        page.press("#filter", "Enter")
        expect(page.locator("#page-info")).to_have_text("page 1, 50 records")
        expect(page.locator("#records tbody tr")).to_have_count(50)
        page.click("th button[data-sort=n]")
        page.wait_for_selector("th button[data-sort=n]:text('▲')")
        page.click("th button[data-sort=n]")
        page.wait_for_selector("th button[data-sort=n]:text('▼')")
        pages = [table_ids(page)]
        for _ in range(2):
            first = pages[-1][0]
            page.click("#next")
            expect(page.locator("#records tbody tr").first).not_to_have_attribute("data-id", first)
            pages.append(table_ids(page))
        results["bulkPages"] = pages
        shoot(page, "bulk")
        # The window screenshot, README's docs/console-records.png, shows the page's top: the header, the filter and
        # the column headers.
        results["bulkWindowTop"] = page.evaluate("""() => ['header', '#filter', '#records thead'].map((selector) => {
            const box = document.querySelector(selector).getBoundingClientRect();
            return box.top >= 0 && box.bottom <= innerHeight;
        })""")

        # A record created by the CLI appears in the open table without a reload.
        created = json.loads(cli("create", "bulk", json.dumps({"n": -1, "even": True, "name": "from the CLI"})))
        page.wait_for_selector(f"#records tbody tr.new[data-id='{created['id']}']")
        results["liveRow"] = created["id"]

        # A table of its own for the table's controls: choosing columns, copying an id, the live switch, a changed
        # row, and a record reached with the keyboard.
        first = json.loads(cli("create", "live", json.dumps({"name": "first", "size": 1, "colour": "red"})))
        page.goto(f"{URL}/#/c/live")
        page.wait_for_selector(f"#records tbody tr[data-id='{first['id']}']")
        expect(page.locator("#records td[data-field=colour]")).to_have_count(1)
        page.click("#records-columns summary")
        page.click("#records-columns label:has-text('colour') input")
        expect(page.locator("#records th button[data-sort=colour]")).to_have_count(0)
        results["columnUnticked"] = {
            "headers": page.eval_on_selector_all("#records thead th", "cells => cells.map(c => c.innerText.trim())"),
            "cells": page.locator("#records td[data-field=colour]").count(),
            "sizeCells": page.locator("#records td[data-field=size]").count()}
        page.click(f"#records tr[data-id='{first['id']}'] td.id button")
        results["copied"] = {"id": first["id"], "clipboard": clipboard(page, first["id"])}
        # Paused, a new record stays out of the table; resumed, the table is loaded again and shows it.
        page.uncheck("#live")
        paused = json.loads(cli("create", "live", json.dumps({"name": "while paused", "size": 2})))
        page.wait_for_timeout(1500)
        results["paused"] = {"id": paused["id"], "shownWhilePaused": page.locator(
            f"#records tbody tr[data-id='{paused['id']}']").count()}
        page.check("#live")
        page.wait_for_selector(f"#records tbody tr[data-id='{paused['id']}']")
        results["paused"]["shownAfterResuming"] = True
        # A record another client changes is redrawn and marked.
        cli("patch", "live", first["id"], json.dumps({"size": 3}))
        marked = f"#records tbody tr.changed[data-id='{first['id']}']"
        page.wait_for_selector(marked)
        results["changedRow"] = page.inner_text(f"{marked} td[data-field=size]")
        # The keyboard reaches a record's link and Enter opens it.
        page.focus("#filter")
        results["tabToRecord"] = tab_to(page, "e => e.matches('#records a[href^=\"#/r/\"]')")
        page.keyboard.press("Enter")
        page.wait_for_selector("#json")
        results["keyboardRecord"] = page.url.rsplit("/", 1)[1]

        # CONFLICT: the record changes under the editor; then reload, and then overwrite (the CLI's record, whose
        # writes here move no row of the pages above: they stay as the server answers them now).
        target = created["id"]
        page.goto(f"{URL}/#/r/bulk/{target}")
        page.wait_for_selector("#json")
        cli("patch", "bulk", target, json.dumps({"by": "another client"}))
        page.fill("#json", json.dumps({"n": 1, "by": "the console"}))
        page.click("#save")
        page.wait_for_selector("#conflict #theirs")
        results["conflictTheirs"] = json.loads(page.inner_text("#conflict #theirs"))
        shoot(page, "conflict")
        page.click("#reload")
        results["afterReload"] = json.loads(page.input_value("#json"))
        page.click("#save")
        expect(page.locator("#status")).to_have_text(re.compile("^Saved"))
        cli("patch", "bulk", target, json.dumps({"by": "another client again"}))
        page.fill("#json", json.dumps({"n": 2, "by": "the console, overwriting"}))
        page.click("#save")
        page.wait_for_selector("#conflict #overwrite")
        page.click("#overwrite")
        expect(page.locator("#status")).to_have_text(re.compile("^Saved"))
        results["afterOverwrite"] = json.loads(cli("get", "bulk", target))["data"]
        shoot(page, "record")

        # Create a record from the page, then delete it, confirming.
        page.goto(f"{URL}/#/r/bulk/new")
        page.fill("#json", json.dumps({"n": -5, "made": "in the console"}))
        page.click("#save")
        page.wait_for_selector("#delete")
        made = page.url.rsplit("/", 1)[1]
        results["createdInPage"] = json.loads(cli("get", "bulk", made))["data"]
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#delete")
        page.wait_for_selector("#records")
        results["deletedInPage"] = made

        # A photo dropped on the gallery: uploaded in chunks, attached to a new record, its thumbnail shown. The
        # connection is cut after the first chunk: the upload goes on on a new one from the server's offset.
        photo = open(os.environ["PHOTO"], "rb").read()
        page.goto(f"{URL}/#/photos/gallery")
        page.wait_for_selector("#drop")
        results["uploadPicker"] = page.locator("#pick").count()
        page.evaluate(WATCH_UPLOAD_STATUS)
        page.evaluate(DROP_AFTER_FIRST_CHUNK, 0x0036)
        page.evaluate("""(b64) => {
            const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
            const data = new DataTransfer();
            data.items.add(new File([bytes], 'photo.jpg', { type: 'image/jpeg' }));
            document.querySelector('#drop').dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true }));
        }""", base64.b64encode(photo).decode())
        page.wait_for_selector("#gallery a[data-blob] img")
        page.wait_for_function("() => document.querySelector('#gallery img').naturalWidth > 0", timeout=DEADLINE_MS)
        page.evaluate("() => window.restoreSend()")
        results["uploadChunks"] = page.evaluate("() => window.uploadChunks")
        results["uploadSeen"] = page.evaluate("() => window.uploadSeen")
        blob = page.get_attribute("#gallery a[data-blob]", "data-blob")
        stored = os.path.join(SHOTS, "stored.jpg")
        subprocess.run(CLI[:-1] + ["blob", "get", blob, "--output", stored], check=True, timeout=120)
        results["photoSame"] = open(stored, "rb").read() == photo
        shoot(page, "photos")

        # The drop zone is a button to the keyboard: Enter and Space open the file picker (each on a page loaded
        # afresh, where no earlier picker is still being answered). The listener is there before the first key, so
        # that the browser already hands its pickers to Playwright when a key opens one.
        choosers = []

        def chosen(chooser):
            choosers.append(chooser)

        page.on("filechooser", chosen)
        results["tabToDrop"] = []
        for key in ("Enter", " "):
            page.reload()
            page.wait_for_selector("#gallery a[data-blob] img")
            results["tabToDrop"].append(tab_to(page, "e => e.id === 'drop'"))
            opened = len(choosers)
            page.keyboard.press(key)
            for _ in range(100):
                if len(choosers) > opened:
                    break
                page.wait_for_timeout(100)
            if len(choosers) > opened:
                choosers[-1].set_files([])
        results["dropKeys"] = [chooser.is_multiple() for chooser in choosers]
        page.remove_listener("filechooser", chosen)

        # The full-size photo, and its download: the bytes of the file uploaded.
        page.click("#gallery a[data-blob]")
        page.wait_for_function("() => document.querySelector('#full')?.naturalWidth > 0", timeout=DEADLINE_MS)
        results["fullSize"] = page.evaluate("() => [document.querySelector('#full').naturalWidth, "
                                            "document.querySelector('#gallery') === null]")
        with page.expect_download() as download:
            page.click("#download")
        results["downloadSame"] = open(download.value.path(), "rb").read() == photo
        shoot(page, "photo")

        page.goto(f"{URL}/#/stats")
        page.wait_for_selector("#latency svg rect")
        # The rate needs two samples, two seconds apart.
        page.wait_for_selector("#rate svg polyline[points*=' ']")
        shoot(page, "stats")

        # A read token: no edit controls, and a write forged from the page's console is refused by the server.
        reader = browser.new_context(viewport={"width": 1280, "height": 800})
        reader.set_default_timeout(DEADLINE_MS)
        rpage = reader.new_page()
        watch_errors(rpage, "read")
        sign_in(rpage, os.environ["READ_TOKEN"])
        rpage.wait_for_selector("#collections tbody tr")
        rpage.goto(f"{URL}/#/r/bulk/{target}")
        rpage.wait_for_selector("#json")
        results["readControls"] = rpage.locator("#save, #delete, #create").count()
        results["readForged"] = rpage.evaluate("""async (token) => {
            const m = await import('/larder.js');
            const l = await m.Larder.connect(`ws://${location.host}/ws`, { token });
            try { await l.request(m.Opcode.CREATE, { collection: 'bulk', data: { forged: true } }); return 'accepted'; }
            catch (e) { return e.name; }
        }""", os.environ["READ_TOKEN"])
        reader.close()

        # Users: accounts the server keeps sign in with an email and a password, open a collection by name (COLLECTIONS
        # is a role token's), and see only their own records under the rules; a wrong password is refused.
        cli("rules", "set", "todos", "--read", "owner", "--create", "owner", "--update", "owner", "--delete", "owner")
        password = "a long password"
        for email in ("ann@example.com", "bob@example.com"):
            subprocess.run(CLI[:-1] + ["users", "create", email], input=password + "\n", text=True, check=True,
                           capture_output=True, timeout=120)
        users = {}
        for email, typed in (("ann@example.com", "wrong password"), ("ann@example.com", password),
                             ("bob@example.com", password)):
            signed = browser.new_context(viewport={"width": 1280, "height": 800})
            signed.set_default_timeout(DEADLINE_MS)
            upage = signed.new_page()
            watch_errors(upage, email)
            upage.goto(URL + "/")
            upage.fill("#email", email)
            upage.fill("#password", typed)
            upage.click("#signin-user button[type=submit]")
            if typed != password:
                expect(upage.locator("#signin-user-error")).to_contain_text("UNAUTHENTICATED")
                results["userWrongPassword"] = upage.text_content("#signin-user-error")
                signed.close()
                continue
            upage.wait_for_selector("#open-collection")
            seen = {"role": upage.text_content("#role"), "statsShown": upage.is_visible("#stats-link")}
            upage.fill("#collection-name", "todos")
            upage.click("#open-collection button[type=submit]")
            expect(upage.locator("#page-info")).to_contain_text("page 1")
            seen["before"] = table_ids(upage)
            if email.startswith("ann"):
                upage.click("#create")
                upage.wait_for_selector("#json")
                upage.fill("#json", json.dumps({"title": "ann's todo", "isFinish": False}))
                upage.click("#save")
                expect(upage.locator("#save")).to_have_text("Save")
                upage.goto(f"{URL}/#/c/todos")
                expect(upage.locator("#records tbody tr")).to_have_count(1)
                # The collection was empty when first opened: its columns come from the first page with records.
                expect(upage.locator("#records thead button[data-sort='title']")).to_have_count(1)
                shoot(upage, "user-records")
            seen["after"] = table_ids(upage)
            users[email] = seen
            if email.startswith("ann"):
                # Sign out revokes the session: presented again, it is refused.
                kept = json.loads(upage.evaluate("() => sessionStorage.getItem('larder.credentials')"))
                upage.click("#signout")
                upage.wait_for_selector("#signin-user")
                results["userSessionAfterSignOut"] = upage.evaluate("""async (session) => {
                    const m = await import('/larder.js');
                    try { await m.Larder.connect(`ws://${location.host}/ws`, { session }); return 'accepted'; }
                    catch (e) { return e.name; }
                }""", kept["session"])
            signed.close()
        results["users"] = users

        # Another origin's page is refused at the upgrade.
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        foreign = context.new_page()
        foreign.goto(f"http://localhost:{server.server_address[1]}/")
        results["foreignOrigin"] = foreign.evaluate("""(url) => new Promise((resolve) => {
            const socket = new WebSocket(url);
            socket.onopen = () => resolve('opened');
            socket.onclose = () => resolve('refused');
        })""", URL.replace("http://", "ws://") + "/ws")
        server.shutdown()
        browser.close()
    results["consoleErrors"] = console_errors
    with open(os.environ["OUT"], "w") as out:
        json.dump(results, out)
    if console_errors:
        print("console errors:\n" + "\n".join(console_errors), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"browser scenarios done in {time.monotonic() - started:.1f} s")
