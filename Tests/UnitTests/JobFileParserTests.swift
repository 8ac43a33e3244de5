import Foundation
@testable import TransferCore
import XCTest

final class JobFileParserTests: XCTestCase {
    let parser = JobFileParser(root: "/data")

    func parse(_ text: String, name: String = "jobs.json") -> Result<[JobSpec], JobFileRejection> {
        parser.parse(name: name, data: Data(text.utf8))
    }

    func errors(_ text: String, name: String = "jobs.json") -> [JobFileError] {
        guard case .failure(let rejection) = parse(text, name: name) else {
            XCTFail("expected a rejection for \(text)")
            return []
        }
        return rejection.errors
    }

    func testOneJobWithDefaults() throws {
        let jobs = try parse(#"{"url": "https://example.com/files/a.iso"}"#).get()
        XCTAssertEqual(jobs.count, 1)
        XCTAssertEqual(jobs[0].kind, .download)
        XCTAssertEqual(jobs[0].destination, "/data/a.iso")
        XCTAssertEqual(jobs[0].priority, 0)
        XCTAssertTrue(jobs[0].id.hasPrefix("jobs-"), jobs[0].id)
    }

    func testJobsListWithEveryDownloadField() throws {
        let text = """
            {"version": 1, "jobs": [
              {"id": "iso", "url": "https://example.com/a.iso", "dest": "isos/", "priority": 5, "connections": 4,
               "sha256": "\(String(repeating: "ab", count: 32))", "overwrite": "skip", "transport": "urlsession",
               "headers": {"Authorization": "Bearer ${env:TOKEN}"}, "retries": 9, "limit_rate": "10M",
               "speed_limit": "2K", "speed_time": 30},
              {"url": "http://example.com/b.bin", "dest": "/data/deep/b.bin", "speed_limit": "0"}
            ]}
            """
        let jobs = try parse(text).get()
        XCTAssertEqual(jobs.map(\.destination), ["/data/isos/a.iso", "/data/deep/b.bin"])
        XCTAssertEqual(jobs[0].connections, 4)
        XCTAssertEqual(jobs[0].overwrite, .skipIfIdentical)
        XCTAssertEqual(jobs[0].headers["Authorization"], "Bearer ${env:TOKEN}", "references stay unexpanded")
        XCTAssertEqual(jobs[0].limitRate, 10 << 20)
        XCTAssertEqual(jobs[0].retries, 9)
        XCTAssertEqual(jobs[0].speedLimit, 2048)
        XCTAssertEqual(jobs[0].speedTime, 30)
        XCTAssertEqual(jobs[1].speedLimit, 0, "no floor")
        XCTAssertEqual(try JobSpec(stored: jobs[0].storedJSON).speedTime, 30, "kept in the store")
        XCTAssertEqual(errors(#"{"url": "https://example.com/a", "speed_limit": "fast"}"#).count, 1)
    }

    func testAChecksumListGivesTheSHA256() throws {
        let jobs = try parse(#"{"url": "https://example.com/r/tool.tar.gz", "checksums": "https://example.com/r/SHA256SUMS", "checksums_name": "dist/tool.tar.gz"}"#).get()
        XCTAssertEqual(jobs[0].checksums, "https://example.com/r/SHA256SUMS")
        XCTAssertEqual(jobs[0].checksumsName, "dist/tool.tar.gz")
        let stored = try JobSpec(stored: jobs[0].storedJSON)
        XCTAssertEqual(stored.checksums, jobs[0].checksums, "kept in the store")
        XCTAssertEqual(stored.checksumsName, jobs[0].checksumsName)
        let sha = String(repeating: "ab", count: 32)
        for (text, field, says) in [
            (#"{"url": "https://e.com/a", "checksums": "ftp://e.com/SUMS"}"#, "checksums", "http:// or https://"),
            (#"{"url": "https://e.com/a", "checksums": "SHA256SUMS"}"#, "checksums", "http:// or https://"),
            ("{\"url\": \"https://e.com/a\", \"sha256\": \"\(sha)\", \"checksums\": \"https://e.com/SUMS\"}", "checksums", "keep one"),
            (#"{"url": "https://e.com/a", "checksums_name": "a"}"#, "checksums_name", "goes with"),
            (#"{"url": "s3://bucket/prefix/", "dest": "out/", "checksums": "https://e.com/SUMS"}"#, "checksums", "is for one file"),
        ] {
            let found = errors(text)
            XCTAssertEqual(found.count, 1, "\(text): \(found)")
            XCTAssertEqual(found.first?.field, field, text)
            XCTAssertTrue(found.first.map { "\($0)".contains(says) } ?? false, "\(text): \(found)")
        }
    }

    func testURLListWithDestinations() throws {
        let text = """
            # mirror
            https://example.com/one.bin
            https://example.com/two.bin   mirror/sub

            """
        let jobs = try parse(text, name: "list.urls").get()
        XCTAssertEqual(jobs.map(\.destination), ["/data/one.bin", "/data/mirror/sub/two.bin"])
        XCTAssertEqual(Set(jobs.map(\.id)).count, 2)
    }

    /// No destination may take a name transferd keeps for partial files, however it is named.
    func testADestinationNamedLikeAPartialFileIsRejected() {
        for text in [#"{"url": "https://example.com/a", "dest": "x.transferd-part"}"#,
                     #"{"url": "https://example.com/a", "dest": "in/x.transferd-part.state"}"#,
                     #"{"url": "https://example.com/a.transferd-part"}"#] {
            let found = errors(text)
            XCTAssertEqual(found.first?.field, "dest", text)
            XCTAssertTrue(found.first?.message.contains("which transferd keeps for its partial files") ?? false, "\(found)")
        }
        XCTAssertEqual(errors("https://example.com/a.transferd-part in/\n", name: "list.urls").count, 1)
        XCTAssertEqual(try parse(#"{"url": "https://example.com/a", "dest": "x.part"}"#).get().first?.destination, "/data/x.part",
                       "NAME.part is an ordinary name")
    }

    func testInvalidJSONNamesTheFileAndPosition() {
        let found = errors(#"{"url": "https://example.com/a" "dest": "x"}"#)
        XCTAssertEqual(found.count, 1)
        XCTAssertTrue(found.first?.description.hasPrefix("jobs.json: not valid JSON") ?? false, "\(found)")
    }

    func testUnknownKeySuggestsTheRightOne() {
        let found = errors(#"{"url": "https://example.com/a", "dset": "x/"}"#)
        XCTAssertEqual(found.first?.field, "dset")
        XCTAssertEqual(found.first?.fix, "did you mean \"dest\"?")
        let misplaced = errors(#"{"url": "https://example.com/a", "part_size": "8M"}"#)
        XCTAssertEqual(misplaced.first?.fix, "it belongs to \"s3-upload\" and \"s3-copy\" jobs")
    }

    func testWrongTypesAreNamed() {
        let found = errors(#"{"jobs": [{"url": "https://example.com/a", "priority": "high", "connections": 2.5}]}"#)
        XCTAssertEqual(Set(found.compactMap(\.field)), ["priority", "connections"])
        XCTAssertTrue(found.allSatisfy { $0.job == 1 })
        XCTAssertTrue(found.contains { $0.message == "must be a whole number, not a string" })
    }

    func testPathsMayNotLeaveTheRoot() {
        for dest in ["../etc/passwd", "/etc/passwd", "a/../../b", "/data2/x"] {
            let found = errors(#"{"url": "https://example.com/a", "dest": "\#(dest)"}"#)
            XCTAssertEqual(found.first?.field, "dest", dest)
            XCTAssertTrue(found.first?.message.contains("outside the root /data") ?? false, dest)
        }
        XCTAssertNoThrow(try parse(#"{"url": "https://example.com/a", "dest": "a/../b/"}"#).get())
    }

    func testDuplicateIDsInOneFile() {
        let found = errors(#"{"jobs": [{"id": "x", "url": "https://e.com/a"}, {"id": "x", "url": "https://e.com/b"}]}"#)
        XCTAssertEqual(found.count, 1)
        XCTAssertEqual(found[0].job, 2)
        XCTAssertEqual(found[0].id, "x")
        XCTAssertEqual(found[0].field, "id")
    }

    func testDuplicateKeysAreRefusedWhereverTheyAre() {
        let cases: [(text: String, key: String, first: (Int, Int), again: (Int, Int))] = [
            ("{\"url\": \"https://e.com/a\",\n \"url\": \"https://evil.example/b\"}", "url", (1, 2), (2, 2)),
            ("{\"version\": 1, \"jobs\": [{\"url\": \"https://e.com/a\"}],\n \"jobs\": []}", "jobs", (1, 16), (2, 2)),
            ("{\"jobs\": [\n {\"url\": \"https://e.com/a\", \"dest\": \"a\", \"dest\": \"b\"}]}", "dest", (2, 29), (2, 42)),
            ("{\"url\": \"https://e.com/a\", \"headers\": {\n  \"X-A\": \"1\",\n  \"X-A\": \"2\"}}", "X-A", (2, 3), (3, 3)),
            ("{\"type\": \"form\", \"url\": \"https://e.com/a\", \"fields\": {\"f\": \"1\", \"f\": \"2\"}}", "f", (1, 55), (1, 65)),
        ]
        for (text, key, first, again) in cases {
            let found = errors(text)
            XCTAssertEqual(found.count, 1, text)
            XCTAssertEqual(found.first?.line, again.0, text)
            XCTAssertEqual(found.first?.column, again.1, text)
            XCTAssertEqual(found.first?.message, "the key \"\(key)\" is given twice in one object (first at line \(first.0), column \(first.1))",
                           text)
        }
        XCTAssertEqual(errors("{\"url\": \"https://e.com/a\",\n \"url\": \"https://e.com/b\"}").first?.description,
                       "jobs.json at line 2, column 2: the key \"url\" is given twice in one object (first at line 1, column 2)"
                           + " — keep one of them: JSON readers disagree on which one counts, so transferd takes neither")
    }

    func testHeadersThatFrameTheRequestOrSteerTheConnectionAreRefused() {
        let text = """
            {"jobs": [
              {"url": "https://e.com/a", "headers": {"Accept": "*/*"}},
              {"type": "put", "url": "https://e.com/b", "source": "b.bin",
               "headers": {"X-Ok": "1", "transfer-encoding": "chunked"}}
            ]}
            """
        let found = errors(text)
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertEqual(found.first?.job, 2)
        XCTAssertEqual(found.first?.field, "headers")
        XCTAssertEqual(found.first?.line, 4)
        XCTAssertEqual(found.first?.column, 29)
        XCTAssertEqual(found.first?.message, "Transfer-Encoding is set by transferd from the body; a job cannot set it")
        // One job in the file: the position is taken from the top object.
        let single = errors("{\"url\": \"https://e.com/a\",\n \"headers\": {\"Host\": \"other.example\"}}")
        XCTAssertEqual(single.first.map { [$0.line, $0.column] }, [2, 14])
        XCTAssertEqual(single.first?.fix, "remove it and put the host in the url")
        // A header line break is still refused, now with its position.
        let injected = errors(#"{"url": "https://e.com/a", "headers": {"X-A": "v\r\nContent-Length: 0"}}"#)
        XCTAssertEqual(injected.first?.message, "the value of X-A contains a carriage return (CR), which a header value may not")
        XCTAssertEqual(injected.first?.column, 40)
    }

    func testEmptyBinaryAndHugeFiles() {
        XCTAssertTrue(errors("").first?.message.contains("empty") ?? false)
        XCTAssertTrue(errors("  \n ").first?.message.contains("empty") ?? false)
        let garbage = Data([0x00, 0xFF, 0xFE, 0x13, 0x37, 0x00, 0x80])
        guard case .failure(let rejection) = parser.parse(name: "blob.json", data: garbage) else { return XCTFail() }
        XCTAssertTrue(rejection.errors[0].message.contains("not UTF-8"), rejection.description)
        let huge = Data(repeating: 0x20, count: JobFileParser.maxFileSize + 1)
        guard case .failure(let tooBig) = parser.parse(name: "huge.json", data: huge) else { return XCTFail() }
        XCTAssertTrue(tooBig.errors[0].message.contains("limit"), tooBig.description)
    }

    func testURLsMustBeUsable() {
        XCTAssertEqual(errors(#"{"url": ""}"#).first?.message, "is empty")
        XCTAssertTrue(errors(#"{"url": "ftp://example.com/a"}"#).first?.message.contains("not supported") ?? false)
        XCTAssertEqual(errors(#"{"dest": "a"}"#).first?.message, "is missing")
        XCTAssertTrue(errors("ftp://x/y", name: "l.urls").first?.message.contains("not supported") ?? false)
    }

    func testSecretsAreReferencesNotTemplates() {
        let found = errors(#"{"url": "https://e.com/a", "headers": {"Authorization": "Bearer ${TOKEN}"}}"#)
        XCTAssertEqual(found.first?.field, "headers")
        XCTAssertEqual(try EnvironmentReference.expand("Bearer ${env:T}", environment: ["T": "s3cr3t"]), "Bearer s3cr3t")
        XCTAssertThrowsError(try EnvironmentReference.expand("${env:MISSING}", environment: [:]))
    }

    func testUploadJobsAreDefined() throws {
        let text = """
            {"jobs": [
              {"type": "put", "url": "https://e.com/up/a", "source": "a.bin", "method": "POST", "content_type": "text/plain"},
              {"type": "form", "url": "https://e.com/form", "fields": {"name": "x"},
               "files": [{"field": "f", "path": "a.bin", "filename": "ä \\"q\\".bin"}]},
              {"type": "s3-upload", "url": "s3://bucket/prefix/", "source": "dir", "part_size": "16M", "parts_in_flight": 4}
            ]}
            """
        let jobs = try parse(text).get()
        XCTAssertEqual(jobs.map(\.kind), [.put, .form, .s3Upload])
        XCTAssertEqual(jobs[0].source, "/data/a.bin")
        XCTAssertEqual(jobs[1].files?.first?.path, "/data/a.bin")
        XCTAssertEqual(jobs[2].partSize, 16 << 20)
        XCTAssertTrue(errors(#"{"type": "s3-upload", "url": "s3://b/k", "source": "a", "part_size": "1M"}"#)
            .contains { $0.field == "part_size" })
    }

    /// An `s3-copy` names an s3:// source and destination; a copy onto itself, between
    /// overlapping prefixes, or with globs for one object is refused with the field and the fix.
    func testS3CopyJobs() throws {
        let jobs = try parse("""
            {"jobs": [
              {"type": "s3-copy", "url": "s3://backup/2026/", "source": "s3://data/2026/", "exclude": ["tmp/*"], "skip_unchanged": true},
              {"type": "s3-copy", "url": "s3://backup/one.bin", "source": "s3://data/one.bin", "part_size": "16M"},
              {"type": "s3-copy", "url": "s3://backup/", "source": "https://example.com/a.iso"},
              {"type": "s3-copy", "url": "s3://backup/b", "source": "s3://data/b", "source_endpoint": "http://other:9000", "source_profile": "old"}
            ]}
            """).get()
        XCTAssertEqual(jobs.map(\.kind), [.s3Copy, .s3Copy, .s3Copy, .s3Copy])
        XCTAssertEqual(jobs[2].source, "https://example.com/a.iso")
        XCTAssertEqual(jobs[3].sourceEndpoint, "http://other:9000")
        XCTAssertEqual(jobs[3].sourceProfile, "old")
        XCTAssertEqual(jobs[0].source, "s3://data/2026/")
        XCTAssertEqual(jobs[0].exclude, ["tmp/*"])
        XCTAssertEqual(jobs[1].partSize, 16 << 20)
        let cases: [(String, String, String)] = [
            (#"{"type": "s3-copy", "url": "s3://b/k"}"#, "source", "is missing"),
            (#"{"type": "s3-copy", "url": "s3://b/k", "source": "/etc/passwd"}"#, "source", "is not an s3:// object or prefix"),
            (#"{"type": "s3-copy", "url": "https://e.com/k", "source": "s3://b/k"}"#, "url", "is not supported"),
            (#"{"type": "s3-copy", "url": "s3://b/k", "source": "s3://b/k"}"#, "url", "is the source itself"),
            (#"{"type": "s3-copy", "url": "s3://b/a/b/", "source": "s3://b/a/"}"#, "url", "overlap"),
            (#"{"type": "s3-copy", "url": "s3://b/k2", "source": "s3://b/k", "include": ["*.bin"]}"#, "include", "only a prefix copy"),
            (#"{"type": "s3-copy", "url": "s3://b/k2", "source": "s3://b/k", "dest": "x"}"#, "dest", "unknown key for a s3-copy job"),
            (#"{"type": "s3-copy", "url": "s3://b/k2", "source": "https://e.com/a", "source_profile": "p"}"#, "source_profile",
             "is for an s3:// source"),

        ]
        for (text, field, message) in cases {
            let found = errors(text)
            XCTAssertTrue(found.contains { $0.field == field && $0.message.contains(message) },
                          "\(text): \(found.map(\.description))")
        }
    }

    func testPathNormalisationIsLexical() {
        XCTAssertEqual(PathNormalization.normalize("/a/./b//c/../d"), "/a/b/d")
        XCTAssertEqual(PathNormalization.normalize("/../x"), "/x")
    }

    /// The fast path (a path already normal is returned as it is) agrees with resolving
    /// segment by segment, on hand-picked paths and on random ones over a small alphabet.
    func testAlreadyNormalPathsAreRecognisedExactly() {
        var paths = ["/", "//", "/a", "/a/", "/a//b", "/.", "/..", "/...", "/a/.", "/a/..", "/.a", "/a.", "/..a", "/a/.../b",
                     "a/b", "", "/a/b/c.part", "/\u{301}/..", "/x/\u{E9}.bin"]
        let alphabet: [Character] = ["/", ".", "a", "\u{E9}"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5000 {
            paths.append(String((0..<Int.random(in: 0...8, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }))
        }
        for path in paths {
            XCTAssertEqual(PathNormalization.isNormal(path), PathNormalization.resolved(path) == path, path)
            XCTAssertEqual(PathNormalization.normalize(path), PathNormalization.resolved(path), path)
        }
    }

    func testListLinesSplitWhereCharacterNewlinesDo() {
        let pieces = ["a", "b", "é", "\u{301}", " ", "\n", "\r", "\r\n", "\u{0B}", "\u{0C}", "\u{85}", "\u{2028}", "\u{2029}",
                      "\u{C2}", "\u{E2}", "\u{2027}", "\u{202A}", "🇸🇪", "\u{200D}", "x\u{301}\n"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let text = (0..<Int.random(in: 0...12, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
            let expected = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).map(String.init)
            XCTAssertEqual(JobFileParser.lines(text).map(String.init), expected, text.debugDescription)
        }
    }

    func testListWordsSplitWhereCharacterSpacesDo() {
        let pieces = ["a", "é", "\u{301}", " ", "\t", "  ", "x", "\u{1}", "%20", "/"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let line = Substring((0..<Int.random(in: 0...10, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined())
            let expected = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            XCTAssertEqual(JobFileParser.words(line), expected, line.debugDescription)
        }
    }

    /// A `resumable` job (the IETF resumable-upload draft): a source and a content type, an
    /// http(s) URL; tus's `chunk_size` does not belong to it.
    func testResumableJobsTakeASourceAndAContentType() throws {
        let jobs = try parse(#"{"type": "resumable", "url": "https://e.com/upload", "source": "a.bin", "content_type": "video/mp4"}"#).get()
        XCTAssertEqual(jobs.first?.kind, .resumable)
        XCTAssertEqual(jobs.first?.source, "/data/a.bin")
        XCTAssertEqual(jobs.first?.contentType, "video/mp4")
        XCTAssertEqual(try JobSpec(stored: jobs[0].storedJSON), jobs[0])
        XCTAssertEqual(errors(#"{"type": "resumable", "url": "s3://b/k", "source": "a.bin"}"#).first?.field, "url")
        XCTAssertEqual(errors(#"{"type": "resumable", "url": "https://e.com/f"}"#).first?.field, "source")
        let misplaced = errors(#"{"type": "resumable", "url": "https://e.com/f", "source": "a", "chunk_size": "8M"}"#)
        XCTAssertEqual(misplaced.first?.field, "chunk_size")
        XCTAssertEqual(misplaced.first?.fix, "it belongs to \"tus\" jobs")
    }
}

/// `mirrors` and `connections_per_mirror` on a download job, and metalinks in the queue folder.
final class MirrorJobFileTests: XCTestCase {
    let parser = JobFileParser(root: "/data")

    func testAJobsMirrorsAreKeptAndStoredAndMistakesNamed() throws {
        let text = #"{"url": "https://a.example/f.iso", "mirrors": ["https://b.example/f.iso", "http://c.example/x/f.iso"], "connections_per_mirror": 4}"#
        let jobs = try parser.parse(name: "m.json", data: Data(text.utf8)).get()
        XCTAssertEqual(jobs[0].mirrors, ["https://b.example/f.iso", "http://c.example/x/f.iso"])
        XCTAssertEqual(jobs[0].connectionsPerMirror, 4)
        XCTAssertEqual(try JobSpec(stored: jobs[0].storedJSON), jobs[0])
        XCTAssertEqual(try JSONDecoder().decode(JobSpec.self, from: Data(jobs[0].storedJSON.utf8)), jobs[0])

        let mistakes: [(String, String)] = [
            (#"{"url": "https://a.example/f", "mirrors": ["ftp://b.example/f"]}"#, "item 1 is not an http:// or https:// URL"),
            (#"{"url": "https://a.example/f", "mirrors": []}"#, "must list 1 to 32 URLs (got 0)"),
            (#"{"url": "https://a.example/f", "mirrors": "https://b.example/f"}"#, "must be a list of strings"),
            (#"{"url": "https://a.example/f", "connections_per_mirror": 2}"#, "goes with \"mirrors\""),
            (#"{"url": "s3://bucket/key", "mirrors": ["https://b.example/f"]}"#, "which is not one"),
        ]
        for (text, message) in mistakes {
            guard case .failure(let rejection) = parser.parse(name: "m.json", data: Data(text.utf8)) else {
                XCTFail("accepted: \(text)")
                continue
            }
            XCTAssertTrue(rejection.errors.contains { $0.description.contains(message) }, "\(text): \(rejection.errors)")
        }
    }

    func testAMetalinkInTheQueueFolderGivesOneDownloadAFile() throws {
        let piece = String(repeating: "ab", count: 32)
        let document = """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="isos/a.iso"><size>3000</size><hash type="sha-256">\(piece)</hash>
                <pieces length="1024" type="sha-256"><hash>\(piece)</hash><hash>\(piece)</hash><hash>\(piece)</hash></pieces>
                <url priority="2">https://b.example/a.iso</url><url priority="1">https://a.example/a.iso</url></file>
              <file name="b.bin"><url>http://c.example/b.bin</url></file>
            </metalink>
            """
        XCTAssertTrue(JobFileParser.isJobFile("x.meta4") && JobFileParser.isJobFile("x.metalink"))
        let jobs = try parser.parse(name: "set.meta4", data: Data(document.utf8)).get()
        XCTAssertEqual(jobs.map(\.destination), ["/data/isos/a.iso", "/data/b.bin"])
        XCTAssertEqual(jobs.map(\.url), ["https://a.example/a.iso", "http://c.example/b.bin"])
        XCTAssertEqual(jobs[0].mirrors, ["https://b.example/a.iso"])
        XCTAssertNil(jobs[1].mirrors)
        XCTAssertEqual(jobs[0].size, 3000)
        XCTAssertEqual(jobs[0].sha256, piece)
        let pieces = try XCTUnwrap(jobs[0].pieces.flatMap(PieceHashes.init(encoded:)))
        XCTAssertEqual(pieces.length, 1024)
        XCTAssertEqual(pieces.hashes.count, 3)
        XCTAssertEqual(pieces.encoded, jobs[0].pieces)
        XCTAssertEqual(try JobSpec(stored: jobs[0].storedJSON), jobs[0])

        // A name that leaves the root, and a document that is not one, are refused with the file named.
        let escaping = #"<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="../etc/x"><url>https://a.example/x</url></file></metalink>"#
        guard case .failure(let rejection) = parser.parse(name: "bad.meta4", data: Data(escaping.utf8)) else {
            return XCTFail("a name with .. was taken")
        }
        XCTAssertEqual(rejection.errors.first?.file, "bad.meta4")
        guard case .failure = parser.parse(name: "junk.meta4", data: Data("not xml".utf8)) else { return XCTFail("junk taken") }
    }

    func testEncodedPieceHashesReadBackAndMalformedOnesAreNot() {
        let pieces = PieceHashes(algorithm: .sha1, length: 5, hashes: [Array(repeating: 0xAB, count: 20), Array(0..<20)])
        XCTAssertEqual(PieceHashes(encoded: pieces.encoded), pieces)
        for broken in ["", "sha-1:5", "sha-1:0:" + String(repeating: "a", count: 40), "md5:5:" + String(repeating: "a", count: 32),
                       "sha-1:5:" + String(repeating: "a", count: 39), "sha-1:5:" + String(repeating: "g", count: 40),
                       "sha-1:5:" + String(repeating: "A", count: 40),
                       "sha-1:+5:" + String(repeating: "a", count: 40)] {
            XCTAssertNil(PieceHashes(encoded: broken), broken)
        }
        // No pieces at all reads back as none (an empty file's list).
        XCTAssertEqual(PieceHashes(encoded: "sha-256:4:")?.hashes, [])
    }

    func testDeleteOnBulkJobsOnly() throws {
        let accepted = #"{"jobs": [{"url": "s3://b/p/", "dest": "out/", "delete": true, "max_delete": 20, "force": false},"#
            + #"{"type": "s3-copy", "source": "s3://b/p/", "url": "s3://b/q/", "delete": true}]}"#
        let jobs = try parser.parse(name: "s.json", data: Data(accepted.utf8)).get()
        XCTAssertEqual(jobs[0].syncOptions, SyncOptions(delete: true, maxDeleteShare: 0.2, force: false))
        XCTAssertEqual(jobs[1].syncOptions, SyncOptions(delete: true))
        XCTAssertEqual(try JobSpec(stored: jobs[0].storedJSON), jobs[0])
        for (text, message) in [
            (#"{"url": "https://a.example/f", "delete": true}"#, "is for a whole folder or prefix"),
            (#"{"url": "s3://b/p/", "dest": "out/", "max_delete": 10}"#, "goes with \"delete\": true"),
            (#"{"url": "s3://b/p/", "dest": "out/", "delete": true, "max_delete": 101}"#, "max_delete"),
        ] {
            guard case .failure(let rejection) = parser.parse(name: "s.json", data: Data(text.utf8)) else {
                XCTFail("accepted: \(text)")
                continue
            }
            XCTAssertTrue(rejection.errors.contains { $0.description.contains(message) }, "\(text): \(rejection.errors)")
        }
    }
}
