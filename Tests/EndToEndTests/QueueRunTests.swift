import CSystem
import Foundation
import TestSupport
import TransferCore
import XCTest

/// `transferd run` on real queue folders.
final class QueueRunTests: XCTestCase {
    func testTwoHundredJobsEndDoneOrFailedWithMatchingResults() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let sizes = (0..<190).map { [16 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20][$0 % 5] + $0 }
        let files = try Fixtures.makeFiles(in: servers, folder: "q200", sizes: sizes)
        var jobs: [[String: Any]] = []
        for (index, file) in files.enumerated() {
            var url = servers.http.appendingPathComponent(file).absoluteString
            if index >= 150 {
                // 40 through the fault server, four kinds of trouble.
                let faults = ["drop_every=100000", "fail=503&fail_count=2", "short_by=1000&short_count=1", "rate=4000000"]
                url = "\(servers.fault.absoluteString)/\(file)?\(faults[index % 4])&key=q200-\(index)-\(UUID().uuidString)"
            }
            jobs.append(["id": "ok-\(index)", "url": url, "dest": "out/\(index).bin", "priority": index % 3])
        }
        for index in 0..<10 {
            jobs.append(["id": "missing-\(index)", "url": servers.http.appendingPathComponent("q200/none-\(index).bin").absoluteString,
                         "dest": "out/missing-\(index).bin"])
        }
        try fixture.drop("batch.json", jobs: jobs)

        let result = try fixture.run(["--jobs", "16"])
        XCTAssertEqual(result.status, 1, "some jobs failed: \(result.stderr.suffix(2000))")
        let store = try fixture.store()
        XCTAssertEqual(try store.counts(), [.done: 190, .failed: 10])
        for (index, file) in files.enumerated() {
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/\(index).bin"), try servers.sha256(of: file), file)
            // Files past the first checkpoint (256 KiB) were tagged for it; the tag is off once in place.
            XCTAssertEqual(getxattr("\(fixture.root)/out/\(index).bin", "user.transferd.file", nil, 0), -1, file)
        }
        for index in 0..<10 {
            let job = try XCTUnwrap(try store.job("missing-\(index)"))
            XCTAssertTrue(job.lastError?.contains("HTTP 404") ?? false, "\(job.lastError ?? "")")
            XCTAssertFalse(FileManager.default.fileExists(atPath: "\(fixture.root)/out/missing-\(index).bin"))
        }
        let done = try fixture.results("done", "batch.json")
        let failed = try fixture.results("failed", "batch.json")
        XCTAssertEqual(Set(done.compactMap { $0["id"] as? String }), Set((0..<190).map { "ok-\($0)" }))
        XCTAssertEqual(done.count, 190)
        XCTAssertEqual(Set(failed.compactMap { $0["id"] as? String }), Set((0..<10).map { "missing-\($0)" }))
        XCTAssertTrue(failed.allSatisfy { ($0["last_error"] as? String)?.contains("404") ?? false })
        XCTAssertTrue(FileManager.default.fileExists(atPath: fixture.queue + "/accepted/batch.json"))
        XCTAssertTrue(result.stdout.contains("transferd retry missing-"), "the failure says what to do")
    }

    /// Crash torture: kill -9 at 20 random moments, restart each time.
    /// A queue on each backend, a job's own rate and a checksum list among its jobs: urlsession
    /// keeps no per-transfer limit, and a queue download without one must not ask it for one.
    func testAQueueRunsOnEitherBackend() throws {
        let servers = try TestServers.current()
        for transport in ["curl", "urlsession"] {
            let fixture = try QueueFixture("backend-\(transport)")
            let files = try Fixtures.makeFiles(in: servers, folder: "backend-\(transport)", sizes: [200_000, 1 << 20])
            try fixture.drop("jobs.json", jobs: files.enumerated().map { index, file in
                ["id": "j\(index)", "url": servers.http.appendingPathComponent(file).absoluteString, "dest": "out/\(index).bin"]
            })
            let result = try fixture.run(["--transport", transport, "--quiet"])
            XCTAssertEqual(result.status, 0, "\(transport): \(result.stderr)")
            for (index, file) in files.enumerated() {
                XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/\(index).bin"), try servers.sha256(of: file), transport)
            }
        }
    }

    func testKilledTwentyTimesEveryJobIsDoneExactlyOnce() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        var generator = SeededGenerator(seed: 20)
        let sizes = (0..<200).map { _ in Int.random(in: (2 << 20)...(10 << 20), using: &generator) }
        let files = try Fixtures.makeFiles(in: servers, folder: "torture", sizes: sizes)
        let total = Int64(sizes.reduce(0, +))
        let jobs: [[String: Any]] = files.enumerated().map { index, file in
            ["id": "t\(index)", "url": servers.http.appendingPathComponent("slow/" + file).absoluteString,
             "dest": "out/\(index).bin"]
        }
        try fixture.drop("torture.json", jobs: jobs)
        let logStart = try nginxLogSize(servers)

        var kills = 0
        while kills < 20 {
            let run = try fixture.start(["--jobs", "4", "--quiet"])
            // About 20 s of transfer at 4 × 16 MiB/s; kills every 0.2–0.8 s (10 s for 20) leave a wide margin.
            usleep(UInt32.random(in: 200_000...800_000, using: &generator))
            if !run.process.isRunning { break }
            kill(run.process.processIdentifier, SIGKILL)
            _ = run.wait()
            kills += 1
        }
        let final = try fixture.run(["--jobs", "4", "--quiet"])
        XCTAssertEqual(final.status, 0, final.stderr)
        XCTAssertEqual(kills, 20, "the queue should outlast 20 kills")

        let store = try fixture.store()
        XCTAssertEqual(try store.counts(), [.done: 200], "no job lost, none left over")
        let done = try fixture.results("done", "torture.json")
        XCTAssertEqual(done.count, 200)
        XCTAssertEqual(Set(done.compactMap { $0["id"] as? String }).count, 200, "each job listed once")
        for (index, file) in files.enumerated() {
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/\(index).bin"), try servers.sha256(of: file), file)
            XCTAssertFalse(FileManager.default.fileExists(atPath: "\(fixture.root)/out/\(index).bin.transferd-part"))
        }
        let fetched = try nginxBytesServed(servers, pathPrefix: "/slow/torture/", since: logStart)
        XCTAssertLessThan(Double(fetched), 1.1 * Double(total), "fetched \(fetched) bytes for \(total) bytes of data")
        print("crash torture: \(kills) kills, fetched \(fetched) bytes for \(total) (\(String(format: "%.3f", Double(fetched) / Double(total)))×)")
    }

    func testBrokenJobFilesAreRejectedOneByOneWhileValidOnesRun() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let url = servers.http.appendingPathComponent("1m.bin").absoluteString
        try fixture.drop("a-invalid.json", #"{"url": "\#(url)" "dest": "x"}"#)
        try fixture.drop("b-unknown-key.json", #"{"url": "\#(url)", "dset": "x"}"#)
        try fixture.drop("c-wrong-type.json", #"{"url": "\#(url)", "priority": "high"}"#)
        try fixture.drop("d-escape.json", #"{"url": "\#(url)", "dest": "../../etc/cron.d/evil"}"#)
        try fixture.drop("e-duplicate-id.json", #"{"jobs": [{"id": "x", "url": "\#(url)"}, {"id": "x", "url": "\#(url)"}]}"#)
        try fixture.drop("f-empty.json", "")
        try fixture.drop("g-huge.json", String(repeating: " ", count: 50_000_000))
        var garbage = Data(count: 4096)
        for index in garbage.indices { garbage[index] = UInt8(truncatingIfNeeded: index &* 7919) }
        try garbage.write(to: URL(fileURLWithPath: fixture.queue + "/h-garbage.json"))
        try fixture.drop("z-valid.json", #"{"id": "good", "url": "\#(url)", "dest": "ok/1m.bin"}"#)
        try fixture.drop(".hidden.json", #"{"url": "\#(url)"}"#)
        try fixture.drop("partial.json.tmp", #"{"url": "#)
        try fixture.drop("notes.txt", "not a job file")

        let result = try fixture.run()
        XCTAssertEqual(result.status, 2, "rejected files are a configuration error: \(result.stderr)")
        XCTAssertEqual(try fixture.store().job("good")?.state, .done)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: fixture.root + "/ok/1m.bin"), try servers.sha256(of: "1m.bin"))

        let expected: [String: [String]] = [
            "a-invalid.json": ["a-invalid.json: not valid JSON"],
            "b-unknown-key.json": ["job 1", "field \"dset\"", "did you mean \"dest\"?"],
            "c-wrong-type.json": ["field \"priority\"", "must be a whole number, not a string"],
            "d-escape.json": ["field \"dest\"", "outside the root"],
            "e-duplicate-id.json": ["job 2 (id \"x\")", "the same id is used twice"],
            "f-empty.json": ["the file is empty"],
            "g-huge.json": ["50000000 bytes; the limit is"],
            "h-garbage.json": ["not UTF-8"],
        ]
        for (name, fragments) in expected {
            let error = try String(contentsOfFile: "\(fixture.queue)/rejected/\(name).error", encoding: .utf8)
            for fragment in fragments { XCTAssertTrue(error.contains(fragment), "\(name): \(error)") }
            XCTAssertTrue(FileManager.default.fileExists(atPath: "\(fixture.queue)/rejected/\(name)"), "kept, not deleted")
        }
        for untouched in [".hidden.json", "partial.json.tmp", "notes.txt"] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: "\(fixture.queue)/\(untouched)"), untouched)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: fixture.root + "/../etc/cron.d/evil"))
    }

    func testSameContentOrSameIDTwiceDoesNotDuplicateJobs() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let job = #"{"id": "once", "url": "\#(servers.http.appendingPathComponent("1m.bin").absoluteString)"}"#
        try fixture.drop("one.json", job)
        XCTAssertEqual(try fixture.run().status, 0)
        try fixture.drop("one.json", job)
        try fixture.drop("copy.json", job)
        let again = try fixture.run()
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(try fixture.store().jobs().count, 1)
        XCTAssertEqual(try fixture.results("done", "one.json").count, 1)
    }

    func testCtrlCPausesAndTheNextRunResumes() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let jobs: [[String: Any]] = (0..<3).map { index in
            ["id": "slow-\(index)", "url": servers.http.appendingPathComponent("slow/64m.bin").absoluteString,
             "dest": "out/\(index).bin"]
        }
        try fixture.drop("slow.json", jobs: jobs)
        let logStart = try nginxLogSize(servers)
        let run = try fixture.start()
        Thread.sleep(forTimeInterval: 1.5)
        let status = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(status.status, 0)
        XCTAssertTrue(status.stdout.contains("running"), "status works from another process while run is active:\n\(status.stdout)")

        let second = try fixture.run()
        XCTAssertEqual(second.status, 2)
        XCTAssertTrue(second.stderr.contains("another transferd run"), second.stderr)

        kill(run.process.processIdentifier, SIGINT)
        let stopped = run.wait()
        XCTAssertEqual(stopped.status, 130, stopped.stderr)
        XCTAssertTrue(stopped.stdout.contains("paused"), stopped.stdout)
        let store = try fixture.store()
        XCTAssertEqual(try store.counts()[.paused], 3)
        XCTAssertTrue(try store.jobs().allSatisfy { $0.checkpoint != nil }, "each kept its progress")

        let resumed = try fixture.run()
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertEqual(try fixture.store().counts(), [.done: 3])
        for index in 0..<3 {
            XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/\(index).bin"), try servers.sha256(of: "64m.bin"))
        }
        let fetched = try nginxBytesServed(servers, pathPrefix: "/slow/64m.bin", since: logStart)
        XCTAssertLessThan(Double(fetched), 1.1 * 3 * 64 * 1048576, "resumed, not restarted")
    }

    func testAPausedJobWaitsWhileAnotherProcessWritesItsPartialFile() throws {
        // A job paused with a checkpoint, then its partial file taken by another writer (a `get`
        // to the same destination): the next run leaves that file alone until it is free.
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        try fixture.drop("slow.json", jobs: [["id": "slow", "url": servers.http.appendingPathComponent("slow/64m.bin").absoluteString,
                                              "dest": "out/0.bin", "connections": 1]])
        let run = try fixture.start()
        Thread.sleep(forTimeInterval: 1.5)
        kill(run.process.processIdentifier, SIGINT)
        XCTAssertEqual(run.wait().status, 130)
        XCTAssertNotNil(try fixture.store().jobs().first?.checkpoint)

        let part = "\(fixture.root)/out/0.bin.transferd-part"
        let other = open(part, O_RDWR)
        XCTAssertGreaterThanOrEqual(other, 0)
        XCTAssertEqual(flock(other, LOCK_EX), 0)
        let before = try SHA256Hasher.hex(ofFileAt: part)
        let waiting = try fixture.start()
        Thread.sleep(forTimeInterval: 3)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: part), before, "written while another process held it")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(fixture.root)/out/0.bin"))
        kill(waiting.process.processIdentifier, SIGINT)
        _ = waiting.wait()
        close(other)

        let finished = try fixture.run()
        XCTAssertEqual(finished.status, 0, finished.stderr)
        XCTAssertEqual(try SHA256Hasher.hex(ofFileAt: "\(fixture.root)/out/0.bin"), try servers.sha256(of: "64m.bin"))
    }

    func testAFinishingJobIsNotRenamedWhileAnotherProcessWritesItsPartialFile() throws {
        // A run died between recording a job finishing and renaming its file; since then a `get`
        // to the same destination writes a new NAME.part. The next run must not put that file in
        // place as the job's: it leaves the job finishing, says so, and waits until the file is free.
        let fixture = try QueueFixture()
        try fixture.drop("one.json", jobs: [["id": "f", "url": "http://127.0.0.1:9/x.bin", "dest": "out/x.bin"]])
        XCTAssertEqual(try TransferdProcess.run(["ingest", "--queue", fixture.queue], directory: fixture.root).status, 0)
        let store = try fixture.store()
        XCTAssertEqual(try store.claimRunnable(limit: 1, now: Date(), excludingHosts: []) { _ in true }.map(\.id), ["f"])
        XCTAssertEqual(try store.markFinishing([(id: "f", bytes: 10, sha256: nil)]), [])
        try FileManager.default.createDirectory(atPath: "\(fixture.root)/out", withIntermediateDirectories: true)
        let part = "\(fixture.root)/out/x.bin.transferd-part"
        XCTAssertTrue(FileManager.default.createFile(atPath: part, contents: Data("0123456789".utf8)))
        XCTAssertEqual(setxattr(part, "user.transferd.file", "t1", 2, 0), 0, "the dead run's tag")
        var other = open(part, O_RDWR)
        XCTAssertGreaterThanOrEqual(other, 0)
        defer { if other >= 0 { close(other) } }
        XCTAssertEqual(flock(other, LOCK_EX), 0)

        let waiting = try fixture.start(["--json"])
        Thread.sleep(forTimeInterval: 2)
        XCTAssertTrue(FileManager.default.fileExists(atPath: part), "renamed while another process held it")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(fixture.root)/out/x.bin"))
        XCTAssertEqual(try store.job("f")?.state, .finishing)
        close(other)
        other = -1

        // Tried again every 5 s: the same run puts it in place once the file is free.
        let finished = waiting.wait()
        XCTAssertEqual(finished.status, 0, finished.stderr)
        // Said once, after the run's start (the live view knows no job before it).
        let events = finished.stdout.split(separator: "\n")
        let started = events.firstIndex { $0.contains("\"run_started\"") }
        let busy = events.indices.filter { events[$0].contains("is being written by another process") }
        XCTAssertEqual(busy.count, 1, finished.stdout)
        XCTAssertLessThan(started ?? .max, busy.first ?? -1, finished.stdout)
        XCTAssertEqual(try store.job("f")?.state, .done)
        XCTAssertEqual(try String(contentsOfFile: "\(fixture.root)/out/x.bin", encoding: .utf8), "0123456789")
        XCTAssertEqual(getxattr("\(fixture.root)/out/x.bin", "user.transferd.file", nil, 0), -1, "the tag is off the file in place")
    }

    func testARunWithFewFileDescriptorsFinishesEveryJob() throws {
        // Each finished download stays open (its lock) until its batch is renamed. With 64
        // descriptors, 200 small files through 16 slots failed 187 jobs with "Too many open
        // files" before the run held back its claims; none may fail.
        try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit"), "needs prlimit (util-linux)")
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let folder = "fd-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: servers.path(folder), withIntermediateDirectories: true)
        var lines = ""
        for index in 0..<200 {
            try Data(repeating: UInt8(index % 251), count: 16 << 10).write(to: URL(fileURLWithPath: servers.path("\(folder)/f\(index).bin")))
            lines += servers.http.appendingPathComponent("\(folder)/f\(index).bin").absoluteString + " out\n"
        }
        try fixture.drop("many.urls", lines)
        let result = try TransferdProcess.run(["run", "--queue", fixture.queue, "--jobs", "16", "--quiet"], directory: fixture.root,
                                              wrapper: ["/usr/bin/prlimit", "--nofile=64:64", "--"])
        XCTAssertEqual(result.status, 0, String(result.stdout.prefix(2000)) + String(result.stderr.prefix(2000)))
        for index in 0..<200 {
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: "\(fixture.root)/out/f\(index).bin")),
                           Data(repeating: UInt8(index % 251), count: 16 << 10))
        }
        XCTAssertEqual(try fixture.store().counts()[.done], 200)
    }

    func testAddRetryAndCancel() throws {
        let servers = try TestServers.current()
        let fixture = try QueueFixture()
        let added = try TransferdProcess.run(["add", servers.http.appendingPathComponent("1m.bin").absoluteString,
                                              servers.http.appendingPathComponent("gone.bin").absoluteString,
                                              "-o", "incoming", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(added.status, 0, added.stderr)
        XCTAssertEqual(try fixture.run().status, 1)
        let store = try fixture.store()
        let failed = try XCTUnwrap(try store.jobs().first { $0.state == .failed })
        XCTAssertTrue(FileManager.default.fileExists(atPath: fixture.root + "/incoming/1m.bin"))

        let retried = try TransferdProcess.run(["retry", failed.id, "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(retried.status, 0, retried.stderr)
        XCTAssertEqual(try store.job(failed.id)?.state, .queued)
        let cancelled = try TransferdProcess.run(["cancel", failed.id, "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(cancelled.status, 0, cancelled.stderr)
        XCTAssertEqual(try store.job(failed.id)?.state, .cancelled)
        XCTAssertEqual(try fixture.run().status, 0, "nothing failed any more")
        let unknown = try TransferdProcess.run(["retry", "nope", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(unknown.status, 2)
        XCTAssertTrue(unknown.stderr.contains("no job with id"), unknown.stderr)
    }

    /// A queue of more jobs than `status` lists (1,000): counts, then the running, failed and
    /// next queued jobs, in claim order, and how to see the rest; `--all` and `--json` list
    /// every job, a page at a time. Before, `status` read and printed every job of the queue
    /// (1M jobs: 8.7-11.7 s and 1.5 GiB).
    /// `status` before any run: files waiting in the queue folder are counted, not "0 jobs" alone,
    /// and what no run will ever read is named with why.
    func testStatusCountsJobFilesWaitingAndNamesFilesNeverRead() throws {
        let fixture = try QueueFixture()
        try fixture.drop("a.json", jobs: [["id": "a", "url": "http://127.0.0.1:9/a", "dest": "out/a"]])
        try fixture.drop("b.urls", "http://127.0.0.1:9/b\n")
        try fixture.drop("jobs.yaml", "url: x\n")
        try fixture.drop(".writing.json", "{")
        try FileManager.default.createDirectory(atPath: fixture.queue + "/later", withIntermediateDirectories: true)
        let before = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(before.status, 0, before.stderr)
        XCTAssertTrue(before.stdout.contains("2 job files wait in \(fixture.queue) to be read (a.json, b.urls)"), before.stdout)
        XCTAssertTrue(before.stdout.contains("jobs.yaml  (not a job file: only *.json and *.urls files are read)"), before.stdout)
        XCTAssertTrue(before.stdout.contains("later/  (a folder: only files directly in the queue folder are read)"), before.stdout)
        XCTAssertFalse(before.stdout.contains(".writing.json"), "a file being written under a dot name is not named")
        let ingested = try TransferdProcess.run(["ingest", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(ingested.status, 0, ingested.stderr)
        let after = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertTrue(after.stdout.hasPrefix("2 jobs: 2 queued"), after.stdout)
        XCTAssertFalse(after.stdout.contains("wait in"), after.stdout)
        // One way to name the queue: --queue. The old argument still works, with a warning;
        // both at once must agree; retry --failed no longer ignores a folder given to it.
        XCTAssertFalse(after.stderr.contains("old way"), after.stderr)
        let old = try TransferdProcess.run(["status", fixture.queue], directory: fixture.root)
        XCTAssertEqual(old.status, 0, old.stderr)
        XCTAssertTrue(old.stdout.hasPrefix("2 jobs: 2 queued"), old.stdout)
        XCTAssertTrue(old.stderr.contains("write --queue \(fixture.queue)"), old.stderr)
        let twice = try TransferdProcess.run(["status", "--queue", fixture.queue, fixture.root], directory: fixture.root)
        XCTAssertEqual(twice.status, 2)
        XCTAssertTrue(twice.stderr.contains("the queue is named twice"), twice.stderr)
        let retry = try TransferdProcess.run(["retry", "--failed", fixture.queue], directory: fixture.root)
        XCTAssertEqual(retry.status, 2)
        XCTAssertTrue(retry.stderr.contains("to name the queue folder write --queue \(fixture.queue)"), retry.stderr)
        // status --json names the retry budget used for what it is.
        let json = try TransferdProcess.run(["status", "--queue", fixture.queue, "--json"], directory: fixture.root)
        XCTAssertTrue(json.stdout.contains("\"failed_attempts\":0"), json.stdout)
        XCTAssertFalse(json.stdout.contains("\"attempts\""), json.stdout)
    }

    func testStatusOfALargeQueueSumsItUpAndAllListsEveryJob() throws {
        let fixture = try QueueFixture()
        let lines = (0..<1_500).map { "http://127.0.0.1:9/f\($0).bin out/\($0 / 100)/" }.joined(separator: "\n") + "\n"
        try fixture.drop("many.urls", lines)
        try fixture.drop("first.json", jobs: [["id": "urgent", "url": "http://127.0.0.1:9/u.bin", "priority": 9]])
        let ingested = try TransferdProcess.run(["ingest", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(ingested.status, 0, ingested.stderr)

        let summed = try TransferdProcess.run(["status", "--queue", fixture.queue], directory: fixture.root)
        XCTAssertEqual(summed.status, 0, summed.stderr)
        let shown = summed.stdout.split(separator: "\n")
        XCTAssertEqual(shown.first, "1501 jobs: 1501 queued")
        XCTAssertTrue(summed.stdout.contains("next queued (first 20 of 1501):"), summed.stdout)
        XCTAssertTrue(shown.contains { $0.hasPrefix("urgent ") }, "the first in claim order: \(summed.stdout)")
        XCTAssertLessThan(shown.count, 40, summed.stdout)
        XCTAssertTrue(summed.stdout.contains("`transferd status --all` lists every job"), summed.stdout)

        let all = try TransferdProcess.run(["status", "--queue", fixture.queue, "--all"], directory: fixture.root)
        XCTAssertEqual(all.status, 0, all.stderr)
        XCTAssertEqual(all.stdout.split(separator: "\n").count, 1 + 1 + 1501, "counts, header, one line per job")
        let json = try TransferdProcess.run(["status", "--queue", fixture.queue, "--json"], directory: fixture.root)
        XCTAssertEqual(json.status, 0, json.stderr)
        let objects = json.stdout.split(separator: "\n")
        XCTAssertEqual(objects.count, 1501)
        XCTAssertEqual(Set(objects.compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["id"] as? String
        }).count, 1501, "every job once")
    }
}

/// A small deterministic generator (SplitMix64), so the torture is repeatable.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
