import Foundation
@testable import TransferCore
import XCTest

/// The job files' JSON parser and the store's hand-written spec form.
final class JSONParserTests: XCTestCase {
    func testValuesKeepTheirKinds() throws {
        let value = try JSONParser.parse(#"{"a": 1, "b": -2.5, "c": 1e3, "d": true, "e": null, "f": [1, "x"], "g": {}, "h": 0}"#)
        XCTAssertEqual(value, .object([
            "a": .integer(1), "b": .number(-2.5), "c": .integer(1000), "d": .bool(true), "e": .null,
            "f": .array([.integer(1), .string("x")]), "g": .object([:]), "h": .integer(0),
        ]))
        XCTAssertEqual(try JSONParser.parse("9223372036854775807"), .integer(Int64.max))
        XCTAssertEqual(try JSONParser.parse("9223372036854775808"), .number(9223372036854775808))
        XCTAssertEqual(try JSONParser.parse("[1.0, -0.0, 2.5e1, 1.5]"), .array([.integer(1), .integer(0), .integer(25), .number(1.5)]))
    }

    func testEscapesAndUnicode() throws {
        let text = #""q\" b\\ s\/ \b\f\n\r\t \u00e9 \ud83d\ude00 ü""#
        XCTAssertEqual(try JSONParser.parse(text), .string("q\" b\\ s/ \u{08}\u{0C}\n\r\t é 😀 ü"))
        // Agrees with Foundation's parser on the same text.
        let foundation = try JSONSerialization.jsonObject(with: Data(text.utf8), options: .fragmentsAllowed) as? String
        XCTAssertEqual(try JSONParser.parse(text), .string(foundation ?? "?"))
    }

    func testErrorsNameLineAndColumn() {
        let cases: [(String, String)] = [
            ("{\"a\": 1,\n \"b\" 2}", "expected ':' after the key \"b\" at line 2, column 6"),
            ("[1, 2", "expected ',' or ']' in a list at line 1, column 6"),
            ("{\"a\": tru}", "unexpected character 't' at line 1, column 7"),
            ("\"abc", "a string is not closed at line 1, column 5"),
            ("01", "a number cannot start with 0 at line 1, column 2"),
            ("{} x", "unexpected text after the JSON value at line 1, column 4"),
            ("\"\\ud800\"", "an unpaired surrogate escape at line 1, column 8"),
            ("\"a\u{01}\"", "a control character inside a string (write it as an escape) at line 1, column 3"),
            ("", "unexpected end of input at line 1, column 1"),
            (String(repeating: "[", count: 600), "nested more than 512 levels deep at line 1, column 513"),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try JSONParser.parse(text), text) { error in
                XCTAssertEqual("\(error)", expected, text)
            }
        }
        XCTAssertThrowsError(try JSONParser.parse(Data([0x22, 0xFF, 0x22]))) { error in
            XCTAssertEqual("\(error)", "a string is not valid UTF-8 at line 1, column 2")
        }
    }

    func testADuplicateKeyIsRefusedWithBothPositions() {
        let text = "{\"a\": 1,\n \"b\": {\"c\": 2,\n   \"c\": 3}}"
        XCTAssertThrowsError(try JSONParser.parse(text)) { error in
            XCTAssertEqual("\(error)", "the key \"c\" is given twice in one object (first at line 2, column 8) at line 3, column 4")
            let duplicate = (error as? JSONParser.Failure)?.duplicate
            XCTAssertEqual(duplicate?.key, "c")
            XCTAssertEqual(duplicate.map { [$0.line, $0.column] }, [2, 8])
        }
        // Keys equal once their escapes are read are the same key.
        XCTAssertThrowsError(try JSONParser.parse(#"{"url": 1, "u\u0072l": 2}"#))
        // The same key in two objects, or in an object inside a value of that key, is fine.
        XCTAssertNoThrow(try JSONParser.parse(#"[{"a": 1}, {"a": 2}, {"a": {"a": 3}}]"#))
    }

    func testPositionOfAPath() throws {
        let data = Data("{\"jobs\": [\n  {\"url\": \"u\"},\n  {\"url\": \"v\", \"headers\": {\"Host\": \"h\"}}\n]}".utf8)
        XCTAssertEqual(JSONParser.position(of: [.key("jobs"), .index(1), .key("headers"), .key("Host")], in: data).map { [$0.line, $0.column] },
                       [3, 28])
        XCTAssertEqual(JSONParser.position(of: [.key("jobs"), .index(0)], in: data).map { [$0.line, $0.column] }, [2, 3])
        XCTAssertNil(JSONParser.position(of: [.key("jobs"), .index(2)], in: data))
        XCTAssertNil(JSONParser.position(of: [.key("nope")], in: data))
    }

    func testStoredSpecRoundTripsAndAgreesWithCodable() throws {
        var full = JobSpec(id: "full", kind: .form, url: "https://h.example/up?x=1", destination: "/d/a b.bin", source: "/s/ü.txt",
                           headers: ["Authorization": "Bearer ${env:T}", "X-Quote": "a\"b\\c"], priority: -3)
        full.transport = "urlsession"
        full.connections = 4
        full.sha256 = String(repeating: "ab", count: 32)
        full.overwrite = .skipIfIdentical
        full.retries = 7
        full.limitRate = 1 << 20
        full.method = "POST"
        full.contentType = "text/plain"
        full.fields = ["name": "line1\nline2", "empty": ""]
        full.files = [JobSpec.FormFile(field: "f", path: "/s/a.bin", filename: "a \"b\".bin", contentType: nil),
                      JobSpec.FormFile(field: "g", path: "/s/b.bin", filename: nil, contentType: "image/png")]
        full.partSize = 8 << 20
        full.partsInFlight = 10
        full.region = "eu-west-1"
        full.endpoint = "http://127.0.0.1:9000"
        full.profile = "work"
        let minimal = JobSpec(id: "min", kind: .download, url: "http://h/a", destination: "/d/a")

        for spec in [full, minimal] {
            XCTAssertEqual(try JobSpec(stored: spec.storedJSON), spec)
            // Rows written by either form read back with the other.
            XCTAssertEqual(try JSONDecoder().decode(JobSpec.self, from: Data(spec.storedJSON.utf8)), spec)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            XCTAssertEqual(try JobSpec(stored: String(decoding: try encoder.encode(spec), as: UTF8.self)), spec)
        }
        XCTAssertThrowsError(try JobSpec(stored: #"{"id": "x", "kind": "teleport", "url": "u"}"#))
        XCTAssertThrowsError(try JobSpec(stored: #"{"id": "x", "kind": "download", "url": "u", "priority": "high"}"#))
    }

    func testHostIsReadFromTheTextAsURLReadsIt() {
        for url in ["http://127.0.0.1:8080/a/b?c#d", "https://user:pw@Example.com/x", "s3://bucket/key/with:colon",
                    "https://h.example", "http://[::1]:9000/p", "https://h.example?q=1", "https://a@b@c.example:1/"] {
            XCTAssertEqual(JobSpec.host(of: url), URL(string: url)?.host ?? "", url)
        }
        XCTAssertEqual(JobSpec.host(of: "not a url"), "")
    }

    func testResultTimestampsAndQuoting() {
        XCTAssertEqual(JSONObject.timestampSeconds(Date(timeIntervalSince1970: 1_795_980_000.9)), "2026-11-29T19:20:00Z")
        XCTAssertEqual(JSONObject.quoted("plain/path"), "\"plain/path\"")
        XCTAssertEqual(JSONObject.quoted("a\"b\\c\nd\u{01}"), #""a\"b\\c\nd\u0001""#)
        var object = JSONObject()
        object.add("list", .array([.int(1), .object(JSONObject())]))
        object.add("n", .null)
        XCTAssertEqual(object.serialized(), #"{"list":[1,{}],"n":null}"#)
        XCTAssertEqual(object.serialized(pretty: true), "{\n  \"list\": [\n    1,\n    {}\n  ],\n  \"n\": null\n}")
    }
}
