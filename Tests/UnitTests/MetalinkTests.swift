@testable import TransferCore
import XCTest

/// Metalink 4 (RFC 5854) and Metalink 3.0 documents read into files, and every document refused.
final class MetalinkTests: XCTestCase {
    private let sha256A = "3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b"
    private let sha256B = "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"
    private let sha1A = "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    private let md5A = "d41d8cd98f00b204e9800998ecf8427e"

    private func piece(_ byte: UInt8, _ count: Int) -> String { String(repeating: String(format: "%02x", byte), count: count) }

    private func parse(_ text: String) throws -> [MetalinkFile] {
        try Metalink.parse(Data(text.utf8), origin: "jobs/release.meta4")
    }

    /// The error `text` is refused with (failing the test when it is read, or refused otherwise).
    private func refusal(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> JobFileError? {
        refusal(Data(text.utf8), file: file, line: line)
    }

    private func refusal(_ data: Data, file: StaticString = #filePath, line: UInt = #line) -> JobFileError? {
        do {
            let files = try Metalink.parse(data, origin: "jobs/release.meta4")
            XCTFail("read, not refused: \(files)", file: file, line: line)
            return nil
        } catch let error as JobFileError {
            XCTAssertEqual(error.file, "jobs/release.meta4", file: file, line: line)
            XCTAssertFalse(error.fix?.isEmpty ?? true, "no fix: \(error)", file: file, line: line)
            return error
        } catch {
            XCTFail("not a JobFileError: \(error)", file: file, line: line)
            return nil
        }
    }

    private func assertRefused(_ text: String, _ message: String, fix: String? = nil, file: StaticString = #filePath, line: UInt = #line) {
        guard let error = refusal(text, file: file, line: line) else { return }
        XCTAssertTrue(error.message.contains(message), "\"\(error.message)\" does not say \"\(message)\"", file: file, line: line)
        if let fix { XCTAssertTrue(error.fix?.contains(fix) ?? false, "\"\(error.fix ?? "")\" does not say \"\(fix)\"", file: file, line: line) }
    }

    /// A Metalink 4 document of one file with `inner` inside the <file name="a.iso">.
    private func v4(_ inner: String, name: String = "a.iso") -> String {
        """
        <?xml version="1.0" encoding="UTF-8"?>
        <metalink xmlns="urn:ietf:params:xml:ns:metalink">
          <file name="\(name)">
            \(inner)
          </file>
        </metalink>
        """
    }

    private let url = "<url>https://mirror.example/a.iso</url>"

    // MARK: Documents read

    func testAMetalink4DocumentWithTwoFilesPrioritiesAndPieces() throws {
        let files = try parse("""
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink" xmlns:x="urn:example:extension">
              <generator>MirrorBrain/2.19.0</generator>
              <origin dynamic="true">https://download.example.org/dist/tool-2.0.iso.meta4</origin>
              <published>2026-11-30T09:00:00Z</published>
              <file name="tool-2.0.iso">
                <size> 10485760 </size>
                <identity>Tool</identity>
                <version>2.0</version>
                <description>Installer image</description>
                <hash type="md5">\(md5A)</hash>
                <hash type="sha-1">\(sha1A)</hash>
                <hash type="sha-256">
                  \(sha256B)
                </hash>
                <pieces length="4194304" type="sha-1">
                  <hash>\(piece(1, 20))</hash>
                  <hash>\(piece(2, 20))</hash>
                  <hash>\(piece(3, 20))</hash>
                </pieces>
                <pieces length="4194304" type="sha-256">
                  <hash>\(piece(0xA1, 32))</hash>
                  <hash>\(piece(0xA2, 32))</hash>
                  <hash>\(piece(0xA3, 32))</hash>
                </pieces>
                <url location="de" priority="2">https://de.mirror.example/dist/tool-2.0.iso</url>
                <url>http://unranked.example/tool-2.0.iso</url>
                <url location="us" priority="1">
                  https://us.mirror.example/dist/tool-2.0.iso
                </url>
                <url priority="1">ftp://ftp.example/dist/tool-2.0.iso</url>
                <url location="fr" priority="2">https://fr.mirror.example/dist/tool-2.0.iso</url>
                <url priority="3">https://de.mirror.example/dist/tool-2.0.iso</url>
                <metaurl mediatype="torrent" priority="1">https://download.example.org/tool-2.0.iso.torrent</metaurl>
                <x:url>https://extension.example/not-a-source</x:url>
                <signature mediatype="application/pgp-signature">-----BEGIN PGP SIGNATURE-----</signature>
              </file>
              <file name="docs/README.txt">
                <size>0</size>
                <url>https://download.example.org/dist/docs/README.txt</url>
                <url>magnet:?xt=urn:btih:0000000000000000000000000000000000000000</url>
              </file>
            </metalink>
            """)
        XCTAssertEqual(files.count, 2)
        let iso = files[0]
        XCTAssertEqual(iso.name, "tool-2.0.iso")
        XCTAssertEqual(iso.size, 10_485_760, "white space trimmed")
        XCTAssertEqual(iso.sha256, sha256B.lowercased(), "trimmed, lowercase")
        XCTAssertEqual(iso.pieces?.algorithm, .sha256, "sha-256 pieces preferred to sha-1")
        XCTAssertEqual(iso.pieces?.length, 4_194_304)
        XCTAssertEqual(iso.pieces?.hashes, [[UInt8](repeating: 0xA1, count: 32), [UInt8](repeating: 0xA2, count: 32),
                                            [UInt8](repeating: 0xA3, count: 32)])
        XCTAssertEqual(iso.urls.map(\.absoluteString), [
            "https://us.mirror.example/dist/tool-2.0.iso",  // priority 1 (the ftp one skipped)
            "https://de.mirror.example/dist/tool-2.0.iso",  // priority 2, first in the document; again at 3: dropped
            "https://fr.mirror.example/dist/tool-2.0.iso",  // priority 2
            "http://unranked.example/tool-2.0.iso",  // no priority: last
        ], "priority ascending, document order among equals, no metaurl, no other namespace's <url>, no repeats")
        XCTAssertEqual(files[1], MetalinkFile(name: "docs/README.txt", size: 0,
                                              urls: [URL(string: "https://download.example.org/dist/docs/README.txt")!]))
    }

    func testAMetalink3Document() throws {
        let files = try Metalink.parse(Data("""
            <?xml version="1.0" encoding="utf-8"?>
            <metalink version="3.0" xmlns="http://www.metalinker.org/" generator="Metalink Editor version 1.1.0"
                      type="static" pubdate="Sat, 28 Nov 2026 10:00:00 GMT">
              <publisher><name>Example</name><url>https://example.org</url></publisher>
              <files>
                <file name="example-1.0.tar.gz">
                  <version>1.0</version>
                  <size>600000</size>
                  <verification>
                    <hash type="md5">\(md5A)</hash>
                    <hash type="sha1">\(sha1A)</hash>
                    <hash type="sha256">\(sha256A)</hash>
                    <pieces length="262144" type="sha1">
                      <hash piece="0">\(piece(0x10, 20))</hash>
                      <hash piece="1">\(piece(0x11, 20))</hash>
                      <hash piece="2">\(piece(0x12, 20))</hash>
                    </pieces>
                  </verification>
                  <resources maxconnections="4">
                    <url type="ftp" location="us" preference="100">ftp://ftp.example.org/example-1.0.tar.gz</url>
                    <url type="http" location="de" preference="90">http://de.example.org/example-1.0.tar.gz</url>
                    <url type="http">http://plain.example.org/example-1.0.tar.gz</url>
                    <url type="https" location="us" preference="100">https://us.example.org/example-1.0.tar.gz</url>
                    <url type="bittorrent" preference="100">https://example.org/example-1.0.tar.gz.torrent</url>
                  </resources>
                </file>
              </files>
            </metalink>
            """.utf8), origin: "example.metalink")
        XCTAssertEqual(files.count, 1)
        let file = files[0]
        XCTAssertEqual(file.name, "example-1.0.tar.gz")
        XCTAssertEqual(file.size, 600_000)
        XCTAssertEqual(file.sha256, sha256A)
        XCTAssertEqual(file.pieces, PieceHashes(algorithm: .sha1, length: 262_144, hashes: [
            [UInt8](repeating: 0x10, count: 20), [UInt8](repeating: 0x11, count: 20), [UInt8](repeating: 0x12, count: 20),
        ]), "v3 spells sha1")
        XCTAssertEqual(file.urls.map(\.absoluteString), [
            "https://us.example.org/example-1.0.tar.gz",
            "http://de.example.org/example-1.0.tar.gz",
            "http://plain.example.org/example-1.0.tar.gz",
        ], "preference descending, none last, ftp and the torrent skipped")
    }

    func testASha1PiecesListAndBothSpellingsInEitherVersion() throws {
        let files = try parse(v4("""
            <hash type="SHA256">\(sha256A)</hash>
            <pieces length="1048576" type="sha1">
              <hash>\(sha1A)</hash>
              <hash>\(piece(0xFF, 20))</hash>
            </pieces>
            <pieces length="1048576" type="md5"><hash>\(md5A)</hash></pieces>
            \(url)
            """))
        let pieces = try XCTUnwrap(files.first?.pieces)
        XCTAssertEqual(files.first?.sha256, sha256A, "v3's spelling in a v4 document")
        XCTAssertEqual(pieces.algorithm, .sha1, "md5 pieces ignored")
        XCTAssertEqual(pieces.length, 1_048_576)
        XCTAssertEqual(pieces.hashes.count, 2)
        XCTAssertEqual(pieces.hashes[0], [0xda, 0x39, 0xa3, 0xee, 0x5e, 0x6b, 0x4b, 0x0d, 0x32, 0x55,
                                          0xbf, 0xef, 0x95, 0x60, 0x18, 0x90, 0xaf, 0xd8, 0x07, 0x09])
        XCTAssertEqual(pieces.hashes[1], [UInt8](repeating: 0xFF, count: 20))
        XCTAssertTrue(pieces.hashes.allSatisfy { $0.count == 20 })
        XCTAssertNil(files.first?.size, "no <size>: the piece count is not checked")
    }

    func testPieceArithmeticWithAShortLastPiece() {
        // 10 bytes in pieces of 4: [0, 4) [4, 8) [8, 10).
        let pieces = PieceHashes(algorithm: .sha256, length: 4, hashes: Array(repeating: [UInt8](repeating: 0, count: 32), count: 3))
        XCTAssertEqual(pieces.range(of: 0, size: 10), 0..<4)
        XCTAssertEqual(pieces.range(of: 1, size: 10), 4..<8)
        XCTAssertEqual(pieces.range(of: 2, size: 10), 8..<10, "the last piece is short")
        XCTAssertEqual(pieces.range(of: 3, size: 10), 10..<10, "past the end: empty")
        XCTAssertEqual(pieces.range(of: 2, size: 12), 8..<12, "a last piece of the whole length")

        XCTAssertEqual(pieces.pieces(overlapping: 0..<10), 0..<3)
        XCTAssertEqual(pieces.pieces(overlapping: 0..<4), 0..<1, "ending on a boundary")
        XCTAssertEqual(pieces.pieces(overlapping: 3..<5), 0..<2, "across a boundary")
        XCTAssertEqual(pieces.pieces(overlapping: 4..<8), 1..<2)
        XCTAssertEqual(pieces.pieces(overlapping: 9..<10), 2..<3, "inside the short last piece")
        XCTAssertEqual(pieces.pieces(overlapping: 5..<5), 1..<1, "an empty range: no piece")
        XCTAssertEqual(pieces.pieces(overlapping: 8..<100), 2..<3, "past the end: only the pieces listed")
        XCTAssertEqual(pieces.pieces(overlapping: 50..<60), 3..<3)

        // Large numbers: 1 GiB pieces of a file near Int64.max never trap.
        let huge = PieceHashes(algorithm: .sha1, length: 1 << 30, hashes: [])
        XCTAssertEqual(huge.range(of: Int.max, size: Int64.max), Int64.max..<Int64.max)
        XCTAssertEqual(huge.range(of: 1, size: Int64.max), (1 << 30)..<(2 << 30))
        XCTAssertEqual(huge.pieces(overlapping: 0..<Int64.max), 0..<0)
    }

    func testAPieceCountMatchingTheSizeIsRead() throws {
        // 8 MiB + 1 byte in 4 MiB pieces: three.
        let three = (0..<3).map { "<hash>\(piece(UInt8($0), 32))</hash>" }.joined()
        let files = try parse(v4("<size>8388609</size><pieces length=\"4194304\" type=\"sha-256\">\(three)</pieces>\(url)"))
        XCTAssertEqual(files.first?.pieces?.hashes.count, 3)
        XCTAssertEqual(files.first?.pieces?.range(of: 2, size: 8_388_609), 8_388_608..<8_388_609)
    }

    func testSafeNestedNamesAndLeadingWhiteSpace() throws {
        let files = try Metalink.parse(Data("\u{FEFF}\n\n  \(v4(url, name: "dir/sub dir/ünïcode.bin"))".utf8), origin: "x")
        XCTAssertEqual(files.first?.name, "dir/sub dir/ünïcode.bin")
        XCTAssertEqual(files.first?.urls, [URL(string: "https://mirror.example/a.iso")!])
        XCTAssertNil(files.first?.sha256)
        XCTAssertNil(files.first?.pieces)
    }

    // MARK: Documents refused

    func testADocumentOverTheLimitIsRefused() {
        XCTAssertEqual(Metalink.maxSize, 8 << 20)
        var data = Data(v4(url).utf8)
        data.append(Data(repeating: 0x20, count: Metalink.maxSize + 1 - data.count))
        let error = refusal(data)
        XCTAssertEqual(error?.message, "the metalink is 8388609 bytes, more than the 8 MiB one may be")
    }

    func testDocumentTypesAndEntitiesAreRefusedBeforeParsing() {
        assertRefused("""
            <?xml version="1.0"?>
            <!doctype metalink [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="a"><url>https://x/&xxe;</url></file></metalink>
            """, "document type declaration", fix: "remove the <!DOCTYPE")
        assertRefused("<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><!EnTiTy a \"b\"></metalink>",
                      "entity declaration", fix: "<!ENTITY")
        let instruction = refusal(v4(url) + "\n  <?evil?>")
        XCTAssertEqual(instruction?.message, "the metalink has a processing instruction (<?…?>) after the XML declaration; metalinks have none")
        XCTAssertEqual(instruction.map { [$0.line, $0.column] }, [7, 3])
    }

    func testOtherEncodingsAreRefused() {
        var latin1 = Data(v4(url).utf8)
        latin1.append(0xFF)
        XCTAssertEqual(refusal(latin1)?.message, "the metalink is not UTF-8 text")
        XCTAssertEqual(refusal(v4(url).data(using: .utf16LittleEndian)!)?.fix, "save the metalink as UTF-8",
                       "UTF-16 (its zero bytes could hide a declaration)")
        assertRefused(v4(url).replacingOccurrences(of: "UTF-8", with: "UTF-7"), "declares the encoding \"UTF-7\"")
    }

    func testMalformedXMLIsRefusedWithTheLineAndColumn() throws {
        let error = try XCTUnwrap(refusal("""
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="a.iso">
                <url>https://mirror.example/a.iso?a=1&b=2</url>
              </file>
            </metalink>
            """))
        XCTAssertTrue(error.message.hasPrefix("the metalink is not well-formed XML (XMLParser error"), error.message)
        XCTAssertTrue(error.message.hasSuffix(": a bad entity reference (a bare &?))"), error.message)
        XCTAssertEqual(error.line, 4)
        XCTAssertNotNil(error.column)
        XCTAssertTrue(error.fix?.contains("&amp;") ?? false)

        let unclosed = try XCTUnwrap(refusal("\n\n<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\">\n<file name=\"a\">"))
        XCTAssertTrue(unclosed.message.contains("not well-formed XML"), unclosed.message)
        XCTAssertEqual(unclosed.line, 4, "the lines skipped before the document still count")
        XCTAssertEqual(refusal(" \n")?.message, "the metalink is empty")
        for cut in ["<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\">", "<metalink", "<a>", "<a"] {
            let error = try XCTUnwrap(refusal(cut))
            XCTAssertTrue(error.message.hasPrefix("the metalink is not well-formed XML ("), error.message)
            XCTAssertNotEqual(error.line, 0, "XMLParser's line 0 (nowhere) is not shown")
        }
        XCTAssertEqual(refusal("<metalink></file>")?.message,
                       "the metalink is not well-formed XML (XMLParser error 76: an end tag does not match its start tag)")
    }

    func testADocumentThatIsNotAMetalinkIsRefused() {
        assertRefused("<html><body>Not found</body></html>", "the root element is <html>, not <metalink>")
        assertRefused("<metalink><file name=\"a\">\(url)</file></metalink>", "has no namespace", fix: "xmlns=\"urn:ietf:params:xml:ns:metalink\"")
        assertRefused("<metalink xmlns=\"urn:example\"><file name=\"a\">\(url)</file></metalink>",
                      "has the namespace \"urn:example\", neither Metalink 4's nor Metalink 3's")
    }

    func testADocumentWithoutFilesIsRefused() {
        assertRefused("<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><generator>x</generator></metalink>",
                      "the metalink describes no file (no <file> element)", fix: "<file name=")
        assertRefused("<metalink xmlns=\"http://www.metalinker.org/\" version=\"3.0\"><files/></metalink>",
                      "no <file> element in <files>", fix: "<files><file")
    }

    func testFilesWithoutAnUnsafeOrARepeatedNameAreRefused() {
        assertRefused("<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><file>\(url)</file></metalink>",
                      "a <file> has no name", fix: "name=\"…\" attribute")
        let unsafe: [(String, String)] = [
            ("", "it is empty"),
            ("  ", "it is empty"),
            ("/etc/passwd", "it is an absolute path"),
            ("../a.iso", "it has a \"..\" component"),
            ("dir/../../a.iso", "it has a \"..\" component"),
            ("./a.iso", "it has a \".\" component"),
            ("dir//a.iso", "it has an empty component"),
            ("dir/", "it has an empty component"),
            ("dir\\a.iso", "it holds a backslash"),
            ("a&#9;b.iso", "it holds a NUL or control character"),
            ("a&#x85;b.iso", "it holds a NUL or control character"),
            (String(repeating: "n", count: 1025), "it is longer than 1024 bytes"),
        ]
        for (name, reason) in unsafe {
            assertRefused(v4(url, name: name), "is not a safe relative path: \(reason)", fix: "relative path")
        }
        XCTAssertEqual(refusal(v4(url, name: "a&#9;b.iso"))?.message,
                       "the file name \"a\\u{9}b.iso\" is not a safe relative path: it holds a NUL or control character",
                       "the control character escaped in the message")
        XCTAssertEqual(refusal(v4(url, name: "../a.iso"))?.field, "name")
        XCTAssertNoThrow(try parse(v4(url, name: String(repeating: "n", count: 1024))))

        assertRefused("""
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="a.iso">\(url)</file>
              <file name="a.iso"><url>https://other.example/a.iso</url></file>
            </metalink>
            """, "two files are named \"a.iso\"", fix: "its own name")
    }

    func testAFileWithoutAnHTTPURLIsRefused() {
        let error = refusal(v4("""
            <url>ftp://ftp.example/a.iso</url>
            <url>magnet:?xt=urn:btih:00</url>
            <metaurl mediatype="torrent">https://example.org/a.iso.torrent</metaurl>
            """))
        XCTAssertEqual(error?.message, "file \"a.iso\" has no http or https URL (2 other sources skipped: ftp, magnet)")
        XCTAssertEqual(error?.fix, "add a <url> with an http:// or https:// address; ftp, magnet and torrent sources are not fetched")
        assertRefused(v4("<size>1</size>"), "file \"a.iso\" has no http or https URL")
        assertRefused(v4("<url>https://</url>"), "the URL \"https://\" is not a valid https URL", fix: "percent-encoded")
    }

    func testAURLWithUserInfoIsRefusedWithoutShowingThePassword() throws {
        let error = try XCTUnwrap(refusal(v4("<url>https://alice:s3cr3t-pw@mirror.example/a.iso</url>")))
        XCTAssertTrue(error.message.hasPrefix("file \"a.iso\": the URL \""), error.message)
        XCTAssertTrue(error.message.hasSuffix("\" holds a user name or password"), error.message)
        XCTAssertFalse(error.description.contains("s3cr3t-pw"), error.description)
        XCTAssertTrue(error.message.contains("mirror.example/a.iso"), error.message)
        XCTAssertTrue(error.fix?.contains(".netrc") ?? false)
        XCTAssertTrue(error.fix?.contains("headers") ?? false)
        XCTAssertEqual(error.field, "url")
        assertRefused(v4("<url>http://bob@mirror.example/a.iso</url>"), "holds a user name or password")
    }

    func testBadSizesAreRefused() {
        assertRefused(v4("<size>ten</size>\(url)"), "file \"a.iso\": the size \"ten\" is not a whole number", fix: "digits only")
        assertRefused(v4("<size>-5</size>\(url)"), "file \"a.iso\": the size \"-5\" is negative")
        assertRefused(v4("<size>1.5</size>\(url)"), "the size \"1.5\" is not a whole number")
        assertRefused(v4("<size></size>\(url)"), "the size \"\" is not a whole number")
        assertRefused(v4("<size>99999999999999999999</size>\(url)"), "the size \"99999999999999999999\" is too large")
    }

    func testBadHashesAreRefused() {
        assertRefused(v4("<hash type=\"sha-256\">\(sha256A.dropLast())</hash>\(url)"),
                      "file \"a.iso\": the sha-256 hash \"\(sha256A.dropLast())\" is not 64 hex digits", fix: "64 digits")
        assertRefused(v4("<hash type=\"sha256\">\(sha256A.dropLast())g</hash>\(url)"), "the sha-256 hash")
        assertRefused(v4("<hash type=\"sha-1\">\(sha1A)00</hash>\(url)"), "the sha-1 hash \"\(sha1A)00\" is not 40 hex digits")
        assertRefused(v4("<hash type=\"md5\">xyz</hash>\(url)"), "the md5 hash \"xyz\" is not 32 hex digits")
        assertRefused(v4("<hash type=\"sha-256\">\(sha256A)</hash><hash type=\"sha-256\">\(sha256B)</hash>\(url)"),
                      "two different sha-256 hashes")
        // An algorithm not known, or none named: not read, not refused.
        XCTAssertNoThrow(try parse(v4("<hash type=\"whirlpool\">??</hash><hash>zz</hash>\(url)")))
    }

    func testBadPiecesAreRefused() {
        let one = "<hash>\(piece(0, 32))</hash>"
        assertRefused(v4("<pieces length=\"0\" type=\"sha-256\">\(one)</pieces>\(url)"),
                      "file \"a.iso\": the piece length \"0\" is not a positive whole number", fix: "length=")
        assertRefused(v4("<pieces length=\"-4\" type=\"sha-256\">\(one)</pieces>\(url)"), "the piece length \"-4\" is not a positive whole number")
        assertRefused(v4("<pieces type=\"sha-256\">\(one)</pieces>\(url)"), "the piece length \"\" is not a positive whole number")
        assertRefused(v4("<pieces length=\"1073741825\" type=\"sha-256\">\(one)</pieces>\(url)"),
                      "the piece length 1073741825 is more than 1 GiB")
        XCTAssertNoThrow(try parse(v4("<pieces length=\"1073741824\" type=\"sha-256\">\(one)</pieces>\(url)")))
        assertRefused(v4("<size>9</size><pieces length=\"4\" type=\"sha-256\">\(one)\(one)</pieces>\(url)"),
                      "file \"a.iso\": 2 piece hashes of 4 bytes each, but a file of 9 bytes has 3 pieces", fix: "correct the <size>")
        assertRefused(v4("<size>8</size><pieces length=\"4\" type=\"sha-256\">\(one)\(one)\(one)</pieces>\(url)"),
                      "3 piece hashes of 4 bytes each, but a file of 8 bytes has 2 pieces")
        assertRefused(v4("<pieces length=\"4\" type=\"sha-256\"><hash>\(piece(0, 20))</hash></pieces>\(url)"),
                      "piece hash 0, \"\(piece(0, 20))\", is not 64 hex digits (sha-256)")
        assertRefused(v4("<pieces length=\"4\" type=\"sha1\"><hash>\(piece(0, 32))</hash></pieces>\(url)"),
                      "is not 40 hex digits (sha-1)")
        assertRefused(v4("<pieces length=\"4\" type=\"sha-256\"></pieces>\(url)"), "<pieces> lists no hash")
        assertRefused(v4("<pieces length=\"4\" type=\"sha1\"><hash piece=\"1\">\(sha1A)</hash></pieces>\(url)"),
                      "piece hash 0 says piece=\"1\"", fix: "in order")
    }

    func testMoreThanAMillionPiecesAreRefused() throws {
        var text = "<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><file name=\"a\"><pieces length=\"1\" type=\"sha1\">"
        text += String(repeating: "<hash/>", count: 1_000_001)
        text += "</pieces>\(url)</file></metalink>"
        XCTAssertLessThan(text.utf8.count, Metalink.maxSize)
        let error = try XCTUnwrap(refusal(text))
        XCTAssertEqual(error.message, "file \"a\": 1000001 piece hashes, more than the 1000000 read")
    }
}
