#!/usr/bin/env python3
"""Drives the dashboard of a running `transferd run --listen` in headless Chromium.

Called by Tests/EndToEndTests/DashboardBrowserTests.swift, which starts the run
with three jobs: CANCEL (a slow download to cancel from the page), WATCH (a
slow download whose bar must move) and RETRY (a download that fails with 404
until RETRY_FILE exists). The script logs in with the token, waits for what a
person would see, presses Cancel and Retry, takes a screenshot, and prints one
JSON object of what it saw. Any expectation not met exits 1 with the reason.

Chromium and its driver are Debian's (/usr/bin/chromium, /usr/bin/chromedriver),
given explicitly so selenium never looks for a driver on the network.
"""
import argparse
import json
import os
import signal
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


class Failure(Exception):
    pass


def wait_for(what, check, timeout=30.0, interval=0.1):
    """Calls check() until it returns something truthy; fails naming `what`."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (StaleElementReferenceException, WebDriverException) as error:
            last_error = error
        time.sleep(interval)
    raise Failure(f"timed out after {timeout:.0f} s waiting for {what}" + (f" ({last_error.msg})" if last_error else ""))


def row(driver, table, job_id):
    rows = driver.find_elements(By.CSS_SELECTOR, f'#{table} tbody tr[data-id="{job_id}"]')
    return rows[0] if rows else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--cancel", required=True)
    parser.add_argument("--watch", required=True)
    parser.add_argument("--retry", required=True)
    parser.add_argument("--retry-file", required=True, help="written before Retry is pressed, so the retry succeeds")
    parser.add_argument("--screenshot", required=True)
    parser.add_argument("--phone-screenshot", required=True, help="the page at 390 px wide")
    parser.add_argument("--ended-screenshot", required=True, help="the page once the run has ended")
    parser.add_argument("--run-pid", type=int, required=True, help="the run, stopped with SIGINT at the end")
    parser.add_argument("--add-url", required=True, help="a URL to add from the page's Add box")
    args = parser.parse_args()
    with open(args.token_file) as handle:
        token = handle.read().strip()

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    seen = {}
    try:
        driver.get(args.base + "/")
        # First visit: the page asks for the token and shows nothing else.
        login = wait_for("the token form", lambda: driver.find_element(By.ID, "login").is_displayed() and driver.find_element(By.ID, "login"))
        if driver.find_element(By.ID, "board").is_displayed():
            raise Failure("the board is shown before a token was given")
        wrong = driver.find_element(By.ID, "token")
        wrong.send_keys("not-the-token-at-all")
        login.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        seen["wrong_token_message"] = wait_for("a refusal of a wrong token",
                                               lambda: driver.find_element(By.ID, "login-error").text)
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
        wait_for("the board", lambda: driver.find_element(By.ID, "board").is_displayed())
        wait_for("the live badge", lambda: driver.find_element(By.ID, "connection").text == "live")
        if driver.find_element(By.ID, "login").is_displayed():
            raise Failure("the token form is still shown after a good token")
        if driver.execute_script("return document.cookie") or driver.execute_script("return localStorage.length"):
            raise Failure("the token was kept beyond the tab (cookie or localStorage)")

        # Rows appear, and the watched job's bar moves.
        wait_for("a row for the job to cancel", lambda: row(driver, "running", args.cancel))
        first = wait_for("a row with progress for the watched job",
                         lambda: (r := row(driver, "running", args.watch)) and r.find_element(By.CSS_SELECTOR, ".bar span").text)
        watched_button = row(driver, "running", args.watch).find_element(By.CSS_SELECTOR, 'button[data-action="cancel"]')
        later = wait_for("the watched job's progress to move",
                         lambda: (r := row(driver, "running", args.watch)) and
                         (text := r.find_element(By.CSS_SELECTOR, ".bar span").text) != first and text)
        seen["progress"] = [first, later]
        # Progress changes the row in place: a button under the pointer is never
        # swapped for a new one between press and release.
        try:
            watched_button.is_enabled()
        except StaleElementReferenceException:
            raise Failure("a progress event rebuilt the watched job's row (its Cancel button was replaced)")
        seen["bar_width"] = row(driver, "running", args.watch).find_element(By.CSS_SELECTOR, ".bar div").get_attribute("style")

        # The failed job is listed with its reason.
        reason = wait_for("the failed job's reason",
                          lambda: (r := row(driver, "failed", args.retry)) and r.find_element(By.CSS_SELECTOR, ".reason").text)
        if "404" not in reason:
            raise Failure(f"the failed job's reason does not say 404: {reason!r}")
        seen["failed_reason"] = reason
        seen["totals"] = {name: driver.find_element(By.ID, "t-" + name).text for name in ("done", "running", "queued", "failed")}
        driver.save_screenshot(args.screenshot)

        # Pause from the page: the job moves to Held with the bytes it has; Resume sends it back to run.
        row(driver, "running", args.cancel).find_element(By.CSS_SELECTOR, 'button[data-action="pause"]').click()
        wait_for("the paused job in the held table", lambda: row(driver, "held", args.cancel))
        wait_for("the paused job's running row to go", lambda: row(driver, "running", args.cancel) is None)
        seen["held_kept"] = wait_for("the held job's bytes",
                                     lambda: (r := row(driver, "held", args.cancel)) and r.find_element(By.CSS_SELECTOR, ".kept").text)
        seen["totals_held"] = wait_for("the held job counted",
                                       lambda: (text := driver.find_element(By.ID, "t-held").text) != "0" and text)
        row(driver, "held", args.cancel).find_element(By.CSS_SELECTOR, 'button[data-action="resume"]').click()
        wait_for("the resumed job's held row to go", lambda: row(driver, "held", args.cancel) is None)
        wait_for("the resumed job running again", lambda: row(driver, "running", args.cancel))

        # The whole queue: paused (its running jobs held), then resumed.
        toggle = driver.find_element(By.ID, "queue-toggle")
        if toggle.text != "Pause queue":
            raise Failure(f"the queue button says {toggle.text!r}, not 'Pause queue'")
        toggle.click()
        wait_for("the queue button to offer a resume", lambda: driver.find_element(By.ID, "queue-toggle").text == "Resume queue")
        wait_for("the running job held with the queue", lambda: row(driver, "held", args.cancel))
        driver.find_element(By.ID, "queue-toggle").click()
        wait_for("the queue button to offer a pause", lambda: driver.find_element(By.ID, "queue-toggle").text == "Pause queue")
        wait_for("the job running again with the queue", lambda: row(driver, "running", args.cancel))
        wait_for("no job left in the held table once all run again", lambda: not driver.find_elements(By.CSS_SELECTOR, "#held tbody tr"))

        # Cancel from the page: the row goes.
        row(driver, "running", args.cancel).find_element(By.CSS_SELECTOR, 'button[data-action="cancel"]').click()
        wait_for("the cancelled job's row to go", lambda: row(driver, "running", args.cancel) is None)

        # Retry from the page, once the file exists: the failed row goes and the job runs to done.
        with open(args.retry_file, "wb") as handle:
            handle.write(b"\x07" * 1000)
        row(driver, "failed", args.retry).find_element(By.CSS_SELECTOR, 'button[data-action="retry"]').click()
        wait_for("the retried job's failed row to go", lambda: row(driver, "failed", args.retry) is None)
        wait_for("the failed count to reach 0", lambda: driver.find_element(By.ID, "t-failed").text == "0", timeout=15)
        # URLs added from the page: a mistake is shown as validate shows it, nothing added; then a good one.
        driver.find_element(By.CSS_SELECTOR, "#add summary").click()
        box = wait_for("the Add box", lambda: driver.find_element(By.ID, "add-text").is_displayed() and driver.find_element(By.ID, "add-text"))
        box.send_keys("ftp://example.com/not-http.bin")
        driver.find_element(By.CSS_SELECTOR, 'button[data-action="add"]').click()
        seen["add_refused"] = wait_for("a refused URL list explained",
                                       lambda: driver.find_element(By.ID, "add-errors").is_displayed() and driver.find_element(By.ID, "add-errors").text)
        if "job 1" not in seen["add_refused"]:
            raise Failure(f"the refusal does not name the line: {seen['add_refused']!r}")
        box = driver.find_element(By.ID, "add-text")
        box.clear()
        box.send_keys(args.add_url)
        driver.find_element(By.CSS_SELECTOR, 'button[data-action="add"]').click()
        seen["add_result"] = wait_for("the URL added", lambda: "1 job added" in (text := driver.find_element(By.ID, "add-result").text) and text)

        # The queue's bandwidth limit, set from the page (harmless here: 64 MiB/s for uploads).
        limit = driver.find_element(By.ID, "limit")
        limit.clear()
        limit.send_keys("fast")
        driver.find_element(By.CSS_SELECTOR, 'button[data-action="set-limit"]').click()
        seen["limit_refused"] = wait_for("a limit that cannot be read refused with the reason",
                                         lambda: "not a rate" in (text := driver.find_element(By.ID, "message").text) and text)
        limit = driver.find_element(By.ID, "limit")
        limit.clear()
        limit.send_keys("64M:off")
        driver.find_element(By.CSS_SELECTOR, 'button[data-action="set-limit"]').click()
        seen["limit_now"] = wait_for("the limit in force",
                                     lambda: "uploads 64 MiB/s" in (text := driver.find_element(By.ID, "limit-now").text) and text)
        message = driver.find_element(By.ID, "message").text
        if message:
            raise Failure(f"the page shows an error: {message!r}")
        seen["totals_after"] = {name: driver.find_element(By.ID, "t-" + name).text for name in ("done", "running", "queued", "failed")}
        # A phone: nothing wider than the screen, the buttons big enough to touch.
        driver.set_window_size(390, 844)
        wait_for("the page at 390 px", lambda: driver.execute_script("return window.innerWidth") <= 390)
        time.sleep(0.3)
        seen["phone_width"] = driver.execute_script("return document.documentElement.scrollWidth")
        seen["phone_viewport"] = driver.execute_script("return document.documentElement.clientWidth")
        if seen["phone_width"] > seen["phone_viewport"]:
            raise Failure(f"at 390 px the page is {seen['phone_width']} px wide: it scrolls sideways")
        small = driver.execute_script(
            "return Array.from(document.querySelectorAll('button')).filter(b => b.offsetParent !== null)"
            ".map(b => b.getBoundingClientRect()).filter(r => r.height < 36).length")
        if small:
            raise Failure(f"{small} visible buttons are under 36 px high at 390 px")
        driver.save_screenshot(args.phone_screenshot)

        # The run ends: the page says so and how, and stops reconnecting.
        wait_for("the watched job to finish", lambda: row(driver, "running", args.watch) is None, timeout=60)
        os.kill(args.run_pid, signal.SIGINT)
        seen["ended"] = wait_for("the run-ended notice",
                                 lambda: driver.find_element(By.ID, "ended").is_displayed() and driver.find_element(By.ID, "ended").text)
        if "stopped" not in seen["ended"]:
            raise Failure(f"the notice does not say the run was stopped: {seen['ended']!r}")
        time.sleep(1.5)
        badge = driver.find_element(By.ID, "connection").text
        if badge != "ended":
            raise Failure(f"after the run ended the badge says {badge!r}")
        driver.save_screenshot(args.ended_screenshot)
        console = [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
        # The wrong token's 401, the refused limit's 400 and the refused URL's 422 are the errors
        # the console may show.
        deliberate = ("401", "status of 400", "status of 422")
        seen["console_errors"] = [entry["message"] for entry in console
                                  if not any(mark in entry["message"] for mark in deliberate)]
        print(json.dumps(seen))
        return 0
    except (Failure, WebDriverException) as failure:
        try:
            driver.save_screenshot(args.screenshot)
        except WebDriverException:
            pass
        # A WebDriverException's text ends in the driver's native stack, which says nothing: its msg is the reason.
        reason = failure.msg if isinstance(failure, WebDriverException) else failure
        print(f"dashboard_check: {reason}; seen so far: {json.dumps(seen)}", file=sys.stderr)
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
