import Foundation
import XCTest

/// Runs the real `transferd` binary (built by scripts/test, path in TRANSFERD_BIN).
package struct TransferdProcess {
    package let process = Process()
    let stdout = Pipe()
    let stderr = Pipe()

    package static func binary() throws -> String {
        guard let path = ProcessInfo.processInfo.environment["TRANSFERD_BIN"],
              FileManager.default.isExecutableFile(atPath: path) else {
            XCTFail("TRANSFERD_BIN is not set to the built binary: run the tests with scripts/test")
            throw XCTSkip("no binary")
        }
        return path
    }

    /// - Parameter wrapper: a command that runs the binary (`prlimit --nofile=64:64 --`), if any.
    package init(_ arguments: [String], directory: String, environment: [String: String]? = nil, wrapper: [String] = []) throws {
        if let command = wrapper.first {
            process.executableURL = URL(fileURLWithPath: command)
            process.arguments = Array(wrapper.dropFirst()) + [try Self.binary()] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: try Self.binary())
            process.arguments = arguments
        }
        if let environment { process.environment = environment }
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
    }

    package struct Result {
        package let status: Int32
        package let stdout: String
        package let stderr: String
    }

    package func wait() -> Result {
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        let err = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stdout: String(decoding: out, as: UTF8.self),
                      stderr: String(decoding: err, as: UTF8.self))
    }

    package static func run(_ arguments: [String], directory: String, environment: [String: String]? = nil,
                           wrapper: [String] = []) throws -> Result {
        try TransferdProcess(arguments, directory: directory, environment: environment, wrapper: wrapper).wait()
    }
}
