import Foundation
import TransferCore
import XCTest

/// Tests/Servers/credentials_server.py, started and stopped by the test.
package final class CredentialsServer {
    private let process = Process()
    /// `http://127.0.0.1:PORT`.
    package let url: String

    package init(token: String, credentials: AWSCredentials, lifetime: Int) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Servers/credentials_server.py").path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, "--lifetime", String(lifetime)]
        // Secrets through the environment, not argv (every user can read /proc/PID/cmdline).
        var environment = ProcessInfo.processInfo.environment
        environment["CREDENTIALS_SERVER_TOKEN"] = token
        environment["CREDENTIALS_SERVER_ACCESS_KEY"] = credentials.accessKeyID
        environment["CREDENTIALS_SERVER_SECRET_KEY"] = credentials.secretAccessKey
        environment["CREDENTIALS_SERVER_SESSION_TOKEN"] = credentials.sessionToken ?? ""
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let line = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        let port = try XCTUnwrap(Int(line.trimmingCharacters(in: .whitespacesAndNewlines)), "credentials server port: \(line)")
        url = "http://127.0.0.1:\(port)"
    }

    /// How often each endpoint was asked (`container`, `imds-token`, `imds-credentials`, `refused`).
    package func stats() throws -> [String: Int] {
        let data = try Data(contentsOf: URL(string: url + "/stats")!)
        return try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Int])
    }

    package func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }

    deinit { stop() }
}
