import Foundation
import TransferCore
import XCTest
@testable import transferd

/// One exit-code table: docs/exit-codes.md lists exactly the codes `ExitCode` has, and each
/// cause gets the code the table gives it, whichever command it ends.
final class ExitCodeTableTests: XCTestCase {
    func testTheDocsTableListsEveryCodeOnce() throws {
        let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/exit-codes.md")
        let text = try String(contentsOf: page, encoding: .utf8)
        let documented = text.split(separator: "\n").compactMap { line -> Int32? in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            return cells.count > 2 ? Int32(cells[1]) : nil
        }
        XCTAssertEqual(documented, ExitCode.all.map(\.rawValue), "docs/exit-codes.md's rows, in order")
    }

    func testEachCauseGetsItsCode() {
        let transport = TransportError(.unsupported, url: URL(string: "https://h.example/f")!, message: "no")
        let cases: [(Error, ExitCode)] = [
            (CancellationError(), .interrupted),
            (UsageError("bad"), .usage),
            (transport, .usage),
            (TransportError(.connect, url: URL(string: "https://h.example/f")!, message: "refused"), .transferFailed),
            (DownloadError.destinationExists(path: "/d/f"), .destinationExists),
            (DownloadError.sizeMismatch(path: "/d/f", expected: 2, actual: 1), .verificationFailed),
            (DownloadError.partInUse(path: "/d/f.transferd-part"), .localError),
            (UploadError.verification("f has SHA-256 a, not the expected b; nothing was sent"), .verificationFailed),
            (UploadError.local(POSIXFailure(operation: "open", path: "/d/f", code: EACCES)), .localError),
            (S3Error.noCredentials(profile: "default"), .usage),
            (AWSCredentialError.incomplete("profile p has role_arn but no source_profile"), .usage),
            (AWSCredentialError.fetch(source: "profile p's credential_process", problem: "exit status 1"), .transferFailed),
            (S3Error.verification("part 1 came back with ETag x"), .verificationFailed),
            (POSIXFailure(operation: "write", path: "/d/f", code: ENOSPC), .localError),
        ]
        for (error, code) in cases {
            XCTAssertEqual(ExitCode.of(error, otherwise: .transferFailed), code, "\(error)")
        }
        struct Unknown: Error {}
        XCTAssertEqual(ExitCode.of(Unknown(), otherwise: .localError), .localError)
    }
}
