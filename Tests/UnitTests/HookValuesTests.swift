import Foundation
@testable import TransferCore
import XCTest

/// Hooks as values: what a job's end owes, the command's environment, the
/// notify body and signature, the outbox's form, and the checks of job files and flags.
final class HookValuesTests: XCTestCase {
    private func spec(onDone: [String]? = nil, onFailed: [String]? = nil, notify: String? = nil) -> JobSpec {
        var spec = JobSpec(id: "j1", kind: .download, url: "https://user:pw@example.com/a.iso?token=s3cr3t", destination: "/data/a.iso")
        spec.onDone = onDone
        spec.onFailed = onFailed
        spec.notify = notify
        return spec
    }

    func testAJobsOwnHooksComeFirstThenTheRuns() {
        let run = RunHooks(onDone: ["run-done"], onFailed: ["run-failed"], notify: "http://hooks.example/run")
        let own = DueHook.due(for: spec(onDone: ["own-done"]), state: .done, run: run, bytes: 5, sha256: "ab", error: nil)
        XCTAssertEqual(own?.command, ["own-done"])
        XCTAssertEqual(own?.notify, "http://hooks.example/run")
        XCTAssertEqual(DueHook.due(for: spec(onDone: ["own-done"]), state: .failed, run: run, bytes: nil, sha256: nil, error: "x")?.command,
                       ["run-failed"])
        XCTAssertNil(DueHook.due(for: spec(onDone: ["x"]), state: .cancelled, run: run, bytes: nil, sha256: nil, error: nil),
                     "a cancelled job owes nothing")
        XCTAssertNil(DueHook.due(for: spec(onDone: ["x"]), state: .failed, run: RunHooks(), bytes: nil, sha256: nil, error: "x"),
                     "no on_failed anywhere, no notify: nothing owed")
        XCTAssertNil(DueHook.due(for: spec(), state: .done, run: RunHooks(), bytes: 1, sha256: nil, error: nil))
    }

    func testTheEnvironmentAndTheNotifyBodyCarryNoSecret() throws {
        let hook = try XCTUnwrap(DueHook.due(for: spec(onDone: ["x"], notify: "http://hooks.example/n"), state: .done, run: RunHooks(),
                                             bytes: 1234, sha256: String(repeating: "e", count: 64), error: nil))
        let environment = hook.environment
        XCTAssertEqual(environment["TRANSFERD_JOB_ID"], "j1")
        XCTAssertEqual(environment["TRANSFERD_STATUS"], "done")
        XCTAssertEqual(environment["TRANSFERD_BYTES"], "1234")
        XCTAssertEqual(environment["TRANSFERD_DEST"], "/data/a.iso")
        XCTAssertEqual(environment["TRANSFERD_SHA256"], String(repeating: "e", count: 64))
        XCTAssertEqual(environment["TRANSFERD_ERROR"], "")
        let url = try XCTUnwrap(environment["TRANSFERD_URL"])
        XCTAssertFalse(url.contains("pw") || url.contains("s3cr3t"), url)
        let body = hook.notifyBody(at: Date(timeIntervalSince1970: 0))
        XCTAssertFalse(body.contains("s3cr3t") || body.contains(":pw@"), body)
        guard case .object(let members) = try JSONParser.parse(body) else { return XCTFail(body) }
        XCTAssertEqual(members["event"], .string("job_done"))
        XCTAssertEqual(members["bytes"], .integer(1234))
        XCTAssertEqual(members["error"], .null)
    }

    func testTheSignatureIsHMACSHA256OfTheBody() {
        // python3: hmac.new(b"k3y", b'{"a":1}', hashlib.sha256).hexdigest()
        XCTAssertEqual(DueHook.signature(body: #"{"a":1}"#, secret: "k3y"),
                       "sha256=32db719f172c48e89dbfa56ed20d9e19cdbfdbe9f652ccdf5fa03494d2444853")
    }

    func testOutboxEntriesRoundTripAndAnythingElseIsNotRun() throws {
        let hook = try XCTUnwrap(DueHook.due(for: spec(onFailed: ["/bin/report", "a b"]), state: .failed, run: RunHooks(),
                                             bytes: nil, sha256: nil, error: "HTTP 404"))
        XCTAssertEqual(DueHook(stored: hook.stored), hook)
        XCTAssertNil(DueHook(stored: "{"))
        XCTAssertNil(DueHook(stored: #"{"id": "j", "state": "cancelled", "command": ["x"]}"#))
        XCTAssertNil(DueHook(stored: #"{"id": "j", "state": "done"}"#), "nothing to run")
        XCTAssertNil(DueHook(stored: #"{"id": "j", "state": "done", "command": []}"#))
        XCTAssertNil(DueHook(stored: #"{"id": "j", "state": "done", "command": ["x", 3]}"#))
    }

    func testOutboxFilesAreWrittenPrivatelyAndRemoved() throws {
        let directory = NSTemporaryDirectory() + "hook-outbox-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let outbox = HookOutbox(directory: directory)
        let hooks = ["a", "b/../c", "d:e"].map { id -> DueHook in
            var spec = spec(onDone: ["x"])
            spec.id = id
            return DueHook.due(for: spec, state: .done, run: RunHooks(), bytes: 1, sha256: nil, error: nil)!
        }
        let owed = try outbox.record(hooks)
        XCTAssertEqual(Set(outbox.entries().map(\.jobID)), ["a", "b/../c", "d:e"])
        // The same job ending again (retried, say) owes a second entry, beside the first.
        let again = try outbox.record([hooks[1]])
        XCTAssertNotEqual(again[0].entry, owed[1].entry)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
        XCTAssertEqual(names.count, 4)
        for name in names {
            XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.posixPermissions] as? Int, 0o600)
        }
        try Data("torn".utf8).write(to: URL(fileURLWithPath: directory + "/torn.json"))
        outbox.remove(owed[1])
        XCTAssertEqual(outbox.entries().map(\.jobID).sorted(), ["a", "b/../c", "d:e"], "only that end's entry went")
        outbox.remove(again[0])
        XCTAssertEqual(Set(outbox.entries().map(\.jobID)), ["a", "d:e"], "a torn file is dropped, not run")
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/torn.json"))
    }

    func testCommandsFromFlagsAndJobFiles() {
        XCTAssertEqual(try HookCommand.parse(flag: "/usr/bin/logger -t transferd").get(), ["/usr/bin/logger", "-t", "transferd"])
        XCTAssertEqual(try HookCommand.parse(flag: #"["/opt/my tools/x", "a b"]"#).get(), ["/opt/my tools/x", "a b"])
        XCTAssertThrowsError(try HookCommand.parse(flag: "   ").get())
        XCTAssertThrowsError(try HookCommand.parse(flag: #"["x", 1]"#).get())
        XCTAssertThrowsError(try HookCommand.parse(flag: "[not json").get())
        XCTAssertNil(HookCommand.notifyProblem("https://hooks.example/x"))
        XCTAssertNotNil(HookCommand.notifyProblem("ftp://hooks.example/x"))
        XCTAssertNotNil(HookCommand.notifyProblem("hooks.example/x"))
        XCTAssertFalse(HookCommand.notifyProblem("ftp://u:hunter2@hooks.example/")!.contains("hunter2"), "the refusal shows no password")

        let refused = JobFileParser(root: "/data").parse(name: "j.json", data: Data(#"{"url": "https://example.com/a", "on_done": ["x"]}"#.utf8))
        guard case .failure(let refusal) = refused else { return XCTFail("a job file's command was taken without --allow-job-hooks") }
        XCTAssertEqual(refusal.errors.first?.field, "on_done")
        XCTAssertTrue(refusal.errors.first?.fix?.contains("--allow-job-hooks") ?? false)
        let parser = JobFileParser(root: "/data", allowsCommands: true)
        let good = parser.parse(name: "j.json", data: Data(#"""
            {"url": "https://example.com/a", "on_done": ["/bin/echo", "done"], "on_failed": ["sh", "-c", "echo $TRANSFERD_ERROR"],
             "notify": "https://hooks.example/t"}
            """#.utf8))
        let spec = try? good.get().first
        XCTAssertEqual(spec?.onDone, ["/bin/echo", "done"])
        XCTAssertEqual(spec?.onFailed, ["sh", "-c", "echo $TRANSFERD_ERROR"])
        XCTAssertEqual(spec?.notify, "https://hooks.example/t")
        XCTAssertEqual(spec.flatMap { try? JobSpec(stored: $0.storedJSON) }, spec, "hooks survive the store")
        guard case .failure(let rejection) = parser.parse(name: "j.json", data: Data(#"""
            {"jobs": [{"url": "https://example.com/a", "on_done": []}, {"url": "https://example.com/b", "on_failed": "rm -rf /"},
                      {"url": "https://example.com/c", "notify": "file:///etc/passwd"}]}
            """#.utf8)) else { return XCTFail("hostile hooks were accepted") }
        XCTAssertEqual(rejection.errors.map(\.field), ["on_done", "on_failed", "notify"])
        XCTAssertEqual(rejection.errors.map(\.job), [1, 2, 3])
    }

    func testTheOutputTailKeepsTheLastLinesInBoundedMemory() {
        let tail = OutputTail(lines: 3)
        for index in 1...10_000 { tail.append(Data("line \(index)\n".utf8)) }
        XCTAssertEqual(tail.lines, ["line 9998", "line 9999", "line 10000"])
        tail.append(Data(repeating: 0x41, count: 1 << 20))
        XCTAssertEqual(tail.lines.count, 1)
        XCTAssertLessThanOrEqual(tail.lines[0].utf8.count, OutputTail.byteLimit)
    }
}
