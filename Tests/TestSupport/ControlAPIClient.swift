import Foundation
import TransferCore
import XCTest

/// A client of `transferd run --listen` for end-to-end tests: requests with the
/// curl command line tool (a real, independent HTTP client) and the waits on them.
package struct ControlAPIClient {
    package let base: String
    package var token: String?

    package init(base: String, token: String? = nil) {
        self.base = base
        self.token = token
    }

    /// A loopback port nothing listens on now (the kernel's choice, released at once).
    package static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw POSIXFailure(operation: "bind", path: "127.0.0.1:0") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    package struct Reply {
        package let status: Int
        package let body: String
        package var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:] }
    }

    /// One request to `base + path` (or to `path` when it is a whole URL), with this client's token
    /// unless `token` says otherwise (`.some(nil)`: none).
    package func request(_ method: String, _ path: String, token: String?? = .none, body: String? = nil, bodyFile: String? = nil,
                        headers: [String] = []) throws -> Reply {
        let url = path.hasPrefix("http") ? path : base + path
        var arguments = ["-s", "-S", "--max-time", "20", "-X", method, "-w", "\n%{http_code}"]
        if let token = token ?? self.token { arguments += ["-H", "Authorization: Bearer \(token)"] }
        for header in headers { arguments += ["-H", header] }
        if let body { arguments += ["--data-binary", body] }
        if let bodyFile { arguments += ["--data-binary", "@" + bodyFile] }
        let result = try Self.runTool("/usr/bin/curl", arguments + [url])
        let text = result.stdout
        guard let split = text.lastIndex(of: "\n"), let status = Int(text[text.index(after: split)...]) else {
            throw POSIXFailure(operation: "curl \(method) \(url): \(result.stderr)", path: url, code: EIO)
        }
        return Reply(status: status, body: String(text[..<split]))
    }

    /// Waits until the API answers (`/metrics` needs no token).
    package func waitUntilServing(timeout: TimeInterval = 20) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let reply = try? request("GET", "/metrics", token: .some(nil)), reply.status == 200 { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
        XCTFail("the API at \(base) did not answer within \(timeout) s")
        throw XCTSkip("no API")
    }

    /// Waits until job `id` is in one of `states`; returns the job as the API shows it.
    @discardableResult
    package func waitForState(_ id: String, _ states: Set<String>, timeout: TimeInterval = 30,
                             file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(timeout)
        var last: [String: Any] = [:]
        while Date() < deadline {
            last = try request("GET", "/v1/jobs/" + id).json
            if let state = last["state"] as? String, states.contains(state) { return last }
            Thread.sleep(forTimeInterval: 0.1)
        }
        XCTFail("job \(id) did not reach \(states) within \(timeout) s: \(last)", file: file, line: line)
        return last
    }

    /// Runs a tool to its end: its stdout, stderr and exit status.
    package static func runTool(_ tool: String, _ arguments: [String]) throws -> (stdout: String, stderr: String, status: Int32) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // Read both pipes at once, so a tool that fills one while the other is read cannot stall.
        let errors = LockedBox(Data())
        let errorsRead = DispatchSemaphore(value: 0)
        Thread {
            let data = err.fileHandleForReading.readDataToEndOfFile()
            errors.withLock { $0 = data }
            errorsRead.signal()
        }.start()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        errorsRead.wait()
        return (String(decoding: data, as: UTF8.self), String(decoding: errors.withLock { $0 }, as: UTF8.self), process.terminationStatus)
    }
}
