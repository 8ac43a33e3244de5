@testable import TransferCore
import XCTest

/// SHA256SUMS as sha256sum and BSD tools write it.
final class ChecksumListTests: XCTestCase {
    private let a = String(repeating: "a", count: 64)
    private let b = String(repeating: "B", count: 64)

    func testEachFormAndTheNamesAsWritten() {
        let list = ChecksumList("""
            # checksums of release 1.2
            \(a)  tool-1.2.tar.gz
            \(b) *tool-1.2.zip\r
            SHA256 (./docs/manual.pdf) = \(a)

            \(String(repeating: "c", count: 32))  old-md5-line.bin
            \(a)  name with spaces.bin
            """)
        XCTAssertEqual(list.sha256(for: "tool-1.2.tar.gz"), a)
        XCTAssertEqual(list.sha256(for: "tool-1.2.zip"), b.lowercased(), "binary mode, CRLF, upper-case hex")
        XCTAssertEqual(list.sha256(for: "docs/manual.pdf"), a, "BSD form, ./ dropped")
        XCTAssertEqual(list.sha256(for: "./docs/manual.pdf"), a)
        XCTAssertEqual(list.sha256(for: "name with spaces.bin"), a)
        XCTAssertNil(list.sha256(for: "old-md5-line.bin"), "not a SHA-256")
        XCTAssertNil(list.sha256(for: "missing.bin"))
        XCTAssertEqual(list.entries.count, 4)
    }

    func testANameListedTwiceWithTwoValuesIsNotUsed() {
        let list = ChecksumList("\(a)  x.bin\n\(b)  x.bin\n\(a)  y.bin\n\(a)  y.bin\n")
        XCTAssertNil(list.sha256(for: "x.bin"))
        XCTAssertEqual(list.ambiguous, ["x.bin"])
        XCTAssertEqual(list.sha256(for: "y.bin"), a, "the same value twice is fine")
    }

    func testMalformedLinesAreSkipped() {
        let list = ChecksumList("\(a)x.bin\n\(a) \n\(a)  \nSHA256 (z.bin) = nothex\nSHA256 (w.bin = \(a)\n\(a.dropLast())  short.bin\n")
        XCTAssertEqual(list.entries, [:])
    }
}
