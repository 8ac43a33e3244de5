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

    func testAPathsLastComponentsAndEscapedNames() {
        let list = ChecksumList("\(a)  dist/tool.tgz\n\(b)  one/x.bin\n\(b)  two/x.bin\n\\\(a)  back\\\\slash\\nline.bin\n")
        XCTAssertEqual(list.sha256(for: "tool.tgz"), a, "the one path ending with the name")
        XCTAssertNil(list.sha256(for: "x.bin"), "two paths end with it: not used")
        XCTAssertEqual(list.sha256(for: "one/x.bin"), b.lowercased())
        XCTAssertEqual(list.sha256(for: "back\\slash\nline.bin"), a, "GNU's escaped name")
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
