import Foundation
import TestSupport
import TransferCore
import XCTest

/// `transferd pause` and `resume` on a queue folder, while a run works it and between runs.
final class SteeringTests: XCTestCase {
    /// Polls `condition` every 0.1 s for up to `seconds`.
    private func eventually(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return try condition()
    }

    private func size(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : -1
    }

    func testARunningJobPausedStopsKeepsItsBytesAndGoesOnFromThemWhenResumed() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let big = try Fixtures.makeFiles(in: servers, folder: "steer", sizes: [16 << 20])[0]
        let small = try Fixtures.makeFiles(in: servers, folder: "steer-small", sizes: [200_000, 300_000])
        // 4 MB/s: the big file takes 4 s, time enough to pause it on the way.
        let key = "steer-\(UUID().uuidString)"
        let slowURL = "\(servers.fault.absoluteString)/\(big)?rate=4000000&key=\(key)"
        try fixture.drop("jobs.json", jobs: [
            ["id": "big", "url": slowURL, "dest": "out/big.bin", "connections": 1],
            ["id": "small-0", "url": servers.http.appendingPathComponent(small[0]).absoluteString, "dest": "out/s0.bin"],
            ["id": "small-1", "url": servers.http.appendingPathComponent(small[1]).absoluteString, "dest": "out/s1.bin"],
        ])
        let run = try fixture.start(["--json"])
        let part = "\(fixture.root)/out/big.bin.transferd-part"
        XCTAssertTrue(eventually(30) { size(part) > 0 }, "the big file started")

        let paused = try TransferdProcess.run(["pause", "big", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(paused.status, 0, paused.stderr)
        XCTAssertTrue(paused.stdout.contains("big: the running transfer stops within a second"), paused.stdout)
        let pausedAt = Date()

        // Without --watch the run ends once nothing else is runnable, naming what is held.
        let ended = run.wait()
        XCTAssertEqual(ended.status, 0, ended.stderr)
        print("steering: run ended \(String(format: "%.2f", Date().timeIntervalSince(pausedAt))) s after the pause")
        let events = ended.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        XCTAssertEqual(events.first { $0["event"] as? String == "held" }?["ids"] as? [String], ["big"], ended.stdout)
        let summary = try XCTUnwrap(events.last, ended.stdout)
        XCTAssertEqual(summary["held"] as? Int, 1)
        XCTAssertEqual(summary["held_in_queue"] as? Int, 1)
        XCTAssertEqual(summary["done"] as? Int, 2)
        let store = try fixture.store()
        XCTAssertEqual(try store.counts(), [.done: 2, .held: 1])
        let held = try XCTUnwrap(try store.job("big"))
        XCTAssertNotNil(held.checkpoint, "its progress is kept")
        // No more bytes once held: the partial file stays as it is.
        let kept = size(part)
        XCTAssertGreaterThan(kept, 0)
        XCTAssertLessThan(kept, 16 << 20)
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(size(part), kept, "nothing writes a held job's file")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(fixture.root)/out/big.bin"))

        // A run started now passes it over and says how to take it up again.
        let idle = try fixture.run()
        XCTAssertEqual(idle.status, 0, idle.stderr)
        XCTAssertTrue((idle.stdout + idle.stderr).contains("1 job is held"), idle.stdout + idle.stderr)
        XCTAssertEqual(try fixture.store().job("big")?.state, .held)
        let status = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertTrue(status.stdout.contains("1 held"), status.stdout)

        let resumed = try TransferdProcess.run(["resume", "big", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertTrue(resumed.stdout.contains("big: queued again"), resumed.stdout)
        let finished = try fixture.run()
        XCTAssertEqual(finished.status, 0, finished.stderr)
        let after = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(try fixture.store().counts(), [.done: 3], "the run said:\n\(finished.stdout)\(finished.stderr)\nstatus says:\n\(after.stdout)")
        // It went on from the bytes it had: a range past the start, and the file not sent twice.
        let served = try servers.stats(key: key)
        XCTAssertTrue(served.ranges.last??.hasPrefix("bytes=0-") == false, "\(served.ranges)")
        XCTAssertLessThan(served.bytes_sent, Int64(16 << 20) + Int64(16 << 20) / 4, "\(served.ranges)")
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/big.bin"), try servers.sha256(of: big))
    }

    func testAPausedQueueStartsNothingUntilResumed() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let files = try Fixtures.makeFiles(in: servers, folder: "steer-queue", sizes: [100_000, 120_000, 140_000])
        try fixture.drop("jobs.json", jobs: files.enumerated().map { index, file in
            ["id": "q\(index)", "url": servers.http.appendingPathComponent(file).absoluteString, "dest": "out/\(index).bin"]
        })
        let paused = try TransferdProcess.run(["pause", "--all", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(paused.status, 0, paused.stderr)
        XCTAssertTrue(paused.stdout.contains("the queue is paused"), paused.stdout)

        let idle = try fixture.run()
        XCTAssertEqual(idle.status, 0, idle.stderr)
        XCTAssertTrue((idle.stdout + idle.stderr).contains("The queue is paused"), idle.stdout + idle.stderr)
        XCTAssertTrue((idle.stdout + idle.stderr).contains("3 jobs wait"), idle.stdout + idle.stderr)
        XCTAssertEqual(try fixture.store().counts(), [.queued: 3], "read, not started")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(fixture.root)/out"))

        let resumed = try TransferdProcess.run(["resume", "--all", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertTrue(resumed.stdout.contains("the queue runs again"), resumed.stdout)
        XCTAssertEqual(try fixture.run().status, 0)
        XCTAssertEqual(try fixture.store().counts(), [.done: 3])
        for (index, file) in files.enumerated() {
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/\(index).bin"), try servers.sha256(of: file))
        }
    }

    func testJobsAreNamedByAnyUniquePrefixAndMistakesAreSaid() throws {
        let fixture = try QueueFixture()
        try fixture.drop("jobs.json", jobs: ["alpha-1", "alpha-2", "beta"].map { id in
            ["id": id, "url": "http://127.0.0.1:9/\(id)", "dest": "out/\(id)"]
        })
        XCTAssertEqual(try TransferdProcess.run(["ingest", "--queue", fixture.queue], directory: fixture.root).status, 0)
        func steer(_ arguments: [String]) throws -> TransferdProcess.Result {
            try TransferdProcess.run(arguments + ["--queue", fixture.queue], directory: fixture.root)
        }
        let byPrefix = try steer(["pause", "bet"])
        XCTAssertEqual(byPrefix.status, 0, byPrefix.stderr)
        XCTAssertTrue(byPrefix.stdout.contains("beta: held"), byPrefix.stdout)
        let ambiguous = try steer(["pause", "alpha"])
        XCTAssertEqual(ambiguous.status, 2)
        XCTAssertTrue(ambiguous.stderr.contains("\"alpha\" starts 2 job ids (alpha-1, alpha-2)"), ambiguous.stderr)
        let unknown = try steer(["pause", "gamma"])
        XCTAssertEqual(unknown.status, 2)
        XCTAssertTrue(unknown.stderr.contains("no job with id \"gamma\""), unknown.stderr)
        let nothing = try steer(["pause"])
        XCTAssertEqual(nothing.status, 2)
        XCTAssertTrue(nothing.stderr.contains("give job IDs, --state STATE, --host HOST or --all"), nothing.stderr)
        let badState = try steer(["pause", "--state", "queud"])
        XCTAssertEqual(badState.status, 2)
        XCTAssertTrue(badState.stderr.contains("did you mean 'queued'?"), badState.stderr)
        let byState = try steer(["pause", "--state", "queued"])
        XCTAssertEqual(byState.status, 0, byState.stderr)
        XCTAssertTrue(byState.stdout.contains("2 jobs held"), byState.stdout)
        XCTAssertEqual(try fixture.store().counts(), [.held: 3])
        let byHost = try steer(["resume", "--host", "127.0.0.1"])
        XCTAssertTrue(byHost.stdout.contains("3 held jobs queued again"), byHost.stdout)
        let notHeld = try steer(["resume", "beta"])
        XCTAssertTrue(notHeld.stdout.contains("beta is not held (it is queued)"), notHeld.stdout)

        // The order: a job moved ahead of the waiting ones, or given a priority.
        let ahead = try steer(["prioritize", "alpha-2"])
        XCTAssertEqual(ahead.status, 0, ahead.stderr)
        XCTAssertTrue(ahead.stdout.contains("alpha-2: priority 1; it starts next"), ahead.stdout)
        XCTAssertEqual(try fixture.store().jobs(in: .queued, firstInClaimOrder: 3).map(\.id), ["alpha-2", "alpha-1", "beta"])
        XCTAssertEqual(try steer(["prioritize", "beta", "--priority", "7"]).status, 0)
        XCTAssertEqual(try fixture.store().jobs(in: .queued, firstInClaimOrder: 3).map(\.id), ["beta", "alpha-2", "alpha-1"])
        let json = try TransferdProcess.run(["status", "--queue", fixture.queue, "--json"], directory: fixture.root)
        XCTAssertTrue(json.stdout.contains("\"id\":\"beta\",\"priority\":7"), json.stdout)
        XCTAssertEqual(try steer(["prioritize", "beta", "--priority", "x"]).status, 2)

        // A mistyped queue folder is said, never made.
        let stray = try TransferdProcess.run(["pause", "beta", "--queue", fixture.root + "/qeueu.d"], directory: fixture.root)
        XCTAssertEqual(stray.status, 2)
        XCTAssertTrue(stray.stderr.contains("is not a folder"), stray.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.root + "/qeueu.d"))
        let typo = try TransferdProcess.run(["pasue", "beta"], directory: fixture.root)
        XCTAssertEqual(typo.status, 2)
        XCTAssertTrue(typo.stderr.contains("did you mean 'pause'?"), typo.stderr)
    }

    func testDerivedIDsAreShownByTheirShortestUniquePrefixAndTakenBackFromIt() throws {
        let fixture = try QueueFixture()
        try fixture.drop("photos.urls", (1...40).map { "http://127.0.0.1:9/p\($0).jpg" }.joined(separator: "\n") + "\n")
        XCTAssertEqual(try TransferdProcess.run(["ingest", "--queue", fixture.queue], directory: fixture.root).status, 0)
        let ids = try fixture.store().jobs().map(\.id)
        XCTAssertEqual(ids.count, 40)
        let status = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(status.status, 0, status.stderr)
        // Each row's first word is the id shown: a prefix of one job's id, of no other's.
        let rows = status.stdout.split(separator: "\n").filter { $0.hasPrefix("photos-") }
        XCTAssertEqual(rows.count, 40, status.stdout)
        var shown: [String: String] = [:]
        for row in rows {
            let short = String(row.split(separator: " ")[0])
            let matches = ids.filter { $0.hasPrefix(short) }
            XCTAssertEqual(matches.count, 1, "\(short) names one job: \(matches)")
            XCTAssertLessThan(short.count, matches[0].count, "shortened: \(short)")
            XCTAssertGreaterThanOrEqual(short.count, "photos-".count + 4)
            shown[matches[0]] = short
        }
        XCTAssertEqual(Set(shown.keys), Set(ids))
        // The form shown is what a person types back, to every verb that takes an id.
        let target = ids[7]
        let short = try XCTUnwrap(shown[target])
        let cancelled = try TransferdProcess.run(["cancel", short, "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(cancelled.status, 0, cancelled.stderr)
        XCTAssertTrue(cancelled.stdout.contains("\(target): cancelled"), cancelled.stdout)
        XCTAssertEqual(try fixture.store().job(target)?.state, .cancelled)
        let retried = try TransferdProcess.run(["retry", short, "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(retried.status, 0, retried.stderr)
        XCTAssertEqual(retried.stdout, "1 job queued again (\(target))\n", "a job named by a prefix is named whole")
        XCTAssertEqual(try fixture.store().job(target)?.state, .queued)
        let ambiguous = try TransferdProcess.run(["cancel", "photos-", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(ambiguous.status, 2)
        XCTAssertTrue(ambiguous.stderr.contains("\"photos-\" starts more than 5 job ids"), ambiguous.stderr)
        let empty = try TransferdProcess.run(["cancel", "", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(empty.status, 2, "an empty name names no job: \(empty.stdout)")
        // `--all` and `--json` keep whole ids, for scripts.
        let all = try TransferdProcess.run(["status", "--all", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertTrue(all.stdout.contains(target + " "), all.stdout)
        let json = try TransferdProcess.run(["status", "--queue", fixture.queue, "--json"], directory: fixture.root)
        XCTAssertTrue(json.stdout.contains("\"id\":\"\(target)\""), json.stdout)
    }

    /// `transferd limit` changes a running run's bandwidth within a second, and outlives runs.
    func testALimitSetWhileRunningIsKeptWithinASecond() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let file = try Fixtures.makeFiles(in: servers, folder: "steer-limit", sizes: [8 << 20])[0]
        try fixture.drop("jobs.json", jobs: [["id": "big", "url": servers.http.appendingPathComponent(file).absoluteString,
                                              "dest": "out/big.bin"]])
        // 256 KiB/s: 8 MiB would take 32 s. Lifted after a second, the rest comes at once.
        let run = try fixture.start(["--limit-rate", "256K"])
        let part = "\(fixture.root)/out/big.bin.transferd-part"
        XCTAssertTrue(eventually(30) { size(part) > 0 }, "the download started")
        Thread.sleep(forTimeInterval: 1)
        XCTAssertLessThan(size(part), 2 << 20, "the run's own --limit-rate holds before the change")
        let lifted = try TransferdProcess.run(["limit", "off", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(lifted.status, 0, lifted.stderr)
        XCTAssertTrue(lifted.stdout.contains("limit: unlimited, for every run of this queue"), lifted.stdout)
        let changedAt = Date()
        let ended = run.wait()
        XCTAssertEqual(ended.status, 0, ended.stderr)
        let took = Date().timeIntervalSince(changedAt)
        print("steering: 8 MiB at 256 KiB/s, limit lifted after 1 s: the run ended \(String(format: "%.2f", took)) s after the change")
        XCTAssertLessThan(took, 15, "the lifted limit reached the running download")
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/big.bin"), try servers.sha256(of: file))

        // Set in the store, it holds for the next run without a flag, and status says so.
        let set = try TransferdProcess.run(["limit", "512K:off", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(set.status, 0, set.stderr)
        let status = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertTrue(status.stdout.contains("limit: uploads 512 KiB/s, downloads unlimited"), status.stdout)
        let cleared = try TransferdProcess.run(["limit", "--clear", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(cleared.status, 0, cleared.stderr)
        let after = try TransferdProcess.run(["limit", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertTrue(after.stdout.contains("no queue-wide limit"), after.stdout)
        let wrong = try TransferdProcess.run(["limit", "fast", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(wrong.status, 2)
        XCTAssertTrue(wrong.stderr.contains("'fast' is not a rate"), wrong.stderr)
    }


    /// One job's own rate changed while it runs: lowered from none, it slows within a second;
    /// raised (the CLI) and set back to its file's (the API), it follows too.
    func testAJobsOwnRateChangesWhileItRuns() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let file = try Fixtures.makeFiles(in: servers, folder: "steer-job-rate", sizes: [24 << 20])[0]
        try fixture.drop("jobs.json", jobs: [["id": "throttled", "url": servers.http.appendingPathComponent(file).absoluteString,
                                              "dest": "out/t.bin", "limit_rate": "8M"]])
        let port = try ControlAPIClient.freePort()
        let run = try fixture.start(["--listen", "127.0.0.1:\(port)", "--quiet"])
        defer { if run.process.isRunning { run.process.terminate() } }
        let part = "\(fixture.root)/out/t.bin.transferd-part"
        XCTAssertTrue(eventually(30) { size(part) > 0 }, "the download started")
        // 8 MiB/s from its file; 64 KiB/s set for it alone: a second later it has nearly stopped.
        let lowered = try TransferdProcess.run(["limit", "--job", "thr", "64K", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(lowered.status, 0, lowered.stderr)
        XCTAssertEqual(lowered.stdout, "throttled: 64 KiB/s; the running transfer follows within a second (an upload from its next attempt)\n")
        Thread.sleep(forTimeInterval: 1.5)
        let slowFrom = size(part)
        Thread.sleep(forTimeInterval: 2)
        let slowBytes = size(part) - slowFrom
        XCTAssertLessThan(slowBytes, 1 << 20, "about 128 KiB in 2 s at 64 KiB/s, not 16 MiB at 8 MiB/s")
        XCTAssertTrue(try TransferdProcess.run(["limit", "--queue", fixture.queue], directory: fixture.root).stdout
                        .contains("job throttled: 64 KiB/s (over its job file's limit_rate)"))
        // Back to its file's 8 MiB/s through the control API: the rest comes in a few seconds.
        let token = try String(contentsOfFile: fixture.queue + "/.transferd/api.token", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let api = ControlAPIClient(base: "http://127.0.0.1:\(port)", token: token)
        try api.waitUntilServing()
        let answer = try api.request("POST", "/v1/jobs/throttled/limit?rate=default")
        XCTAssertEqual(answer.status, 200, answer.body)
        XCTAssertTrue(answer.body.contains("\"rate\":\"default\""), answer.body)
        let changedAt = Date()
        XCTAssertTrue(eventually(30) { size("\(fixture.root)/out/t.bin") == 24 << 20 }, "the download finished at its file's rate")
        print("steering: a job's rate back to 8 MiB/s: \(String(format: "%.2f", Date().timeIntervalSince(changedAt))) s for the rest")
        XCTAssertEqual(run.wait().status, 0)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/t.bin"), try servers.sha256(of: file))
        let unknown = try TransferdProcess.run(["limit", "--job", "nosuch", "1M", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertNotEqual(unknown.status, 0)
        let wrong = try TransferdProcess.run(["limit", "--job", "throttled", "fast", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(wrong.status, 2)
        XCTAssertTrue(wrong.stderr.contains("like 512K or 10M, off, or default, not 'fast'"), wrong.stderr)
    }

    /// `transferd purge` forgets ended jobs only, by state and age, and says how many.
    func testPurgeForgetsEndedJobsByStateAndAge() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let file = try Fixtures.makeFiles(in: servers, folder: "steer-purge", sizes: [1000])[0]
        try fixture.drop("jobs.json", jobs: [
            ["id": "ok", "url": servers.http.appendingPathComponent(file).absoluteString, "dest": "out/ok.bin"],
            ["id": "gone", "url": servers.http.appendingPathComponent("steer-purge/none.bin").absoluteString, "dest": "out/gone.bin"],
        ])
        XCTAssertEqual(try fixture.run(["--quiet"]).status, 1)
        func purge(_ arguments: [String]) throws -> TransferdProcess.Result {
            try TransferdProcess.run(["purge", "--queue", fixture.queue] + arguments, directory: fixture.root)
        }
        let young = try purge(["--state", "done,failed", "--older-than", "1h"])
        XCTAssertEqual(young.status, 0, young.stderr)
        XCTAssertTrue(young.stdout.contains("purged 0 done or failed jobs that ended more than 1h ago"), young.stdout)
        let purgedDone = try purge([])
        XCTAssertTrue(purgedDone.stdout.contains("purged 1 done job"), purgedDone.stdout)
        XCTAssertEqual(try fixture.store().counts(), [.failed: 1])
        let wrong = try purge(["--state", "queued"])
        XCTAssertEqual(wrong.status, 2)
        XCTAssertTrue(wrong.stderr.contains("only ended jobs are purged"), wrong.stderr)
        // The failed job of the same file retried: its result files are rewritten, and the done
        // job the store forgot keeps its entry.
        let retried = try TransferdProcess.run(["retry", "--failed", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(retried.status, 0, retried.stderr)
        let done = String(decoding: try Data(contentsOf: URL(fileURLWithPath: fixture.queue + "/done/jobs.json")), as: UTF8.self)
        XCTAssertTrue(done.contains("\"id\" : \"ok\"") || done.contains("\"id\": \"ok\""), done)
        XCTAssertEqual(try purge(["--state", "done,failed,cancelled"]).status, 0)
        XCTAssertEqual(try fixture.store().counts(), [.queued: 1])
    }


    /// `transferd limit --jobs` changes how many jobs a running run transfers at once.
    func testJobsAtOnceChangeWhileRunning() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let names = try Fixtures.makeFiles(in: servers, folder: "steer-jobs", sizes: Array(repeating: 5_000_000, count: 4))
        // 1 MB/s each: one at a time, the four take 20 s.
        try fixture.drop("jobs.json", jobs: names.enumerated().map { index, file in
            ["id": "j\(index)", "url": "\(servers.fault.absoluteString)/\(file)?rate=1000000&key=steer-jobs-\(UUID().uuidString)",
             "dest": "out/\(index).bin"]
        })
        let run = try fixture.start(["--jobs", "1", "--quiet"])
        // The store is made by the run: read it afresh each time.
        func running() -> Int { (try? fixture.store().counts()[.running]) ?? 0 }
        XCTAssertTrue(eventually(30) { running() == 1 }, "one job runs")
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(running(), 1, "--jobs 1 holds before the change")
        // Four at once, but two to one host: two run (all four are the fault server's).
        let more = try TransferdProcess.run(["limit", "--jobs", "4", "--per-host", "2", "--queue", fixture.queue],
                                            directory: fixture.root)
        XCTAssertEqual(more.status, 0, more.stderr)
        XCTAssertTrue(more.stdout.contains("jobs at once: 4 in each run of this queue"), more.stdout)
        XCTAssertTrue(more.stdout.contains("connections to one host at once: 2"), more.stdout)
        XCTAssertTrue(eventually(5) { running() == 2 }, "two to the one host")
        Thread.sleep(forTimeInterval: 0.7)
        XCTAssertEqual(running(), 2, "the per-host limit holds")
        let back = try TransferdProcess.run(["limit", "--per-host", "default", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(back.status, 0, back.stderr)
        let changedAt = Date()
        XCTAssertTrue(eventually(5) { running() >= 3 }, "the run took more jobs at once")
        print("steering: per-host 2 -> the run's own: \(String(format: "%.2f", Date().timeIntervalSince(changedAt))) s to three running")
        XCTAssertEqual(run.wait().status, 0)
        XCTAssertEqual(try fixture.store().counts(), [.done: 4])
        let wrong = try TransferdProcess.run(["limit", "--jobs", "0", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(wrong.status, 2)
        XCTAssertTrue(wrong.stderr.contains("from 1 to 1000"), wrong.stderr)
    }

}
