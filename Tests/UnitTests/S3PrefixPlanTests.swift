import Foundation
@testable import TransferCore
import XCTest

/// Where a listed key goes below the destination folder, the filters, what
/// counts as unchanged, and the listing reader: pure decisions, no I/O.
final class S3PrefixPlanTests: XCTestCase {
    func testKeysArePlacedBelowThePrefixOrRefusedWithAReason() {
        XCTAssertEqual(S3PrefixPlan.placement(key: "data/a/b.bin", prefix: "data/"), .file("a/b.bin"))
        XCTAssertEqual(S3PrefixPlan.placement(key: "a/b.bin", prefix: ""), .file("a/b.bin"))
        XCTAssertEqual(S3PrefixPlan.placement(key: "data/dir/", prefix: "data/"), .folderMarker)
        XCTAssertEqual(S3PrefixPlan.placement(key: "data/", prefix: "data/"), .folderMarker)
        for key in ["data/../escape", "data/a/../../x", "data/./x", "data//x", "data/a//x", "data/a\u{1}b", "data/a\nb",
                    "data/" + String(repeating: "n", count: 256)] {
            guard case .refused(let reason) = S3PrefixPlan.placement(key: key, prefix: "data/") else {
                return XCTFail("\(key.debugDescription) was not refused")
            }
            XCTAssertFalse(reason.isEmpty)
        }
        guard case .refused(let reason) = S3PrefixPlan.placement(key: "/etc/passwd", prefix: "") else {
            return XCTFail("an absolute key was not refused")
        }
        XCTAssertTrue(reason.contains("absolute"), reason)
        XCTAssertEqual(S3PrefixPlan.placement(key: "data/sp ace+é..txt", prefix: "data/"), .file("sp ace+é..txt"))
    }

    func testFiltersIncludeThenExclude() {
        let filter = S3PrefixPlan.Filter(include: ["*.parquet", "keep/*"], exclude: ["tmp/*"])
        XCTAssertTrue(filter.takes("a/b.parquet"), "* crosses /, as in aws s3 --include")
        XCTAssertTrue(filter.takes("keep/x.txt"))
        XCTAssertFalse(filter.takes("tmp/b.parquet"), "an exclude wins")
        XCTAssertFalse(filter.takes("a/b.csv"), "not included")
        XCTAssertTrue(S3PrefixPlan.Filter().takes("anything"))
        XCTAssertFalse(S3PrefixPlan.Filter(exclude: ["*"]).takes("x"))
    }

    func testUnchangedBySizeAndRecordedETagOrMD5() {
        let object = S3ListedObject(key: "k", size: 10, etag: "0123456789abcdef0123456789abcdef")
        var asked = 0
        func md5(_ value: String?) -> () -> String? { { asked += 1; return value } }
        XCTAssertFalse(S3PrefixPlan.unchanged(listed: object, localSize: nil, recordedETag: nil, localMD5: md5(nil)))
        XCTAssertFalse(S3PrefixPlan.unchanged(listed: object, localSize: 9, recordedETag: object.etag, localMD5: md5(nil)))
        XCTAssertTrue(S3PrefixPlan.unchanged(listed: object, localSize: 10, recordedETag: object.etag, localMD5: md5(nil)))
        XCTAssertFalse(S3PrefixPlan.unchanged(listed: object, localSize: 10, recordedETag: "other", localMD5: md5(object.etag)))
        XCTAssertEqual(asked, 0, "a recorded ETag decides without reading the file")
        XCTAssertTrue(S3PrefixPlan.unchanged(listed: object, localSize: 10, recordedETag: nil, localMD5: md5(object.etag.uppercased())))
        XCTAssertFalse(S3PrefixPlan.unchanged(listed: object, localSize: 10, recordedETag: nil, localMD5: md5("ff")))
        let multipart = S3ListedObject(key: "k", size: 10, etag: "0123456789abcdef0123456789abcdef-3")
        XCTAssertFalse(S3PrefixPlan.unchanged(listed: multipart, localSize: 10, recordedETag: nil, localMD5: md5(multipart.etag)),
                       "a multipart ETag is no MD5 of the file: without a record, the file is fetched again")
    }

    func testListingPagesAreReadWithEncodedKeysAndCursors() throws {
        let page = try S3ListPage.parse("""
            <?xml version="1.0" encoding="UTF-8"?>
            <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>data%2F</Prefix>\
            <EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>\
            <Contents><Key>data/sp+ace%2Bplus%C3%A9.txt</Key><Size>3</Size><ETag>&#34;abc&#34;</ETag></Contents>\
            <Contents><Key>data/b</Key><Size>0</Size><ETag>"def-2"</ETag></Contents>\
            <NextContinuationToken>tok/en+=</NextContinuationToken></ListBucketResult>
            """)
        XCTAssertEqual(page.objects, [S3ListedObject(key: "data/sp ace+plusé.txt", size: 3, etag: "abc"),
                                      S3ListedObject(key: "data/b", size: 0, etag: "def-2")])
        XCTAssertEqual(page.next, .token("tok/en+="))
        let last = try S3ListPage.parse("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>")
        XCTAssertEqual(last, S3ListPage(objects: [], next: nil))
        let noToken = try S3ListPage.parse("<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>z</Key><Size>1</Size></Contents></ListBucketResult>")
        XCTAssertEqual(noToken.next, .startAfter("z"), "a truncated page without a token goes on after its last key")
        XCTAssertThrowsError(try S3ListPage.parse("<Error><Code>AccessDenied</Code></Error>"))
        XCTAssertThrowsError(try S3ListPage.parse("<ListBucketResult><Contents><Key>z</Key><Size>-1</Size></Contents></ListBucketResult>"))
    }

    func testPrefixURLs() {
        XCTAssertEqual(S3Prefix("s3://b/data/"), S3Prefix(bucket: "b", prefix: "data/"))
        XCTAssertEqual(S3Prefix("s3://b/"), S3Prefix(bucket: "b", prefix: ""))
        XCTAssertEqual(S3Prefix("s3://b"), S3Prefix(bucket: "b", prefix: ""))
        XCTAssertNil(S3Prefix("s3://b/key"), "one object, not a prefix")
        XCTAssertNil(S3Prefix("s3:///x/"))
        XCTAssertNil(S3Prefix("http://b/x/"))
    }

    func testAPrefixJobNeedsAFolderAndGlobsNeedAPrefix() {
        let parser = JobFileParser(root: "/data")
        guard case .success(let jobs) = parser.parse(name: "p.json", data: Data(#"""
            {"url": "s3://bucket/logs/", "dest": "mirror/", "include": ["*.gz"], "exclude": ["tmp/*"], "overwrite": "skip"}
            """#.utf8)) else { return XCTFail("a prefix job with a folder was refused") }
        XCTAssertEqual(jobs.first?.destination, "/data/mirror")
        XCTAssertEqual(jobs.first?.include, ["*.gz"])
        XCTAssertEqual(jobs.first?.exclude, ["tmp/*"])
        let stored = try? JobSpec(stored: jobs[0].storedJSON)
        XCTAssertEqual(stored?.include, ["*.gz"], "globs survive the store")
        XCTAssertEqual(stored?.exclude, ["tmp/*"])
        guard case .failure(let noDest) = parser.parse(name: "p.json", data: Data(#"{"url": "s3://bucket/logs/"}"#.utf8)) else {
            return XCTFail("a prefix without a folder was accepted")
        }
        XCTAssertTrue(noDest.description.contains("folder"), noDest.description)
        guard case .failure(let globs) = parser.parse(name: "p.json", data: Data(#"{"url": "http://h/f", "include": ["*"]}"#.utf8)) else {
            return XCTFail("globs on a single download were accepted")
        }
        XCTAssertTrue(globs.description.contains("prefix"), globs.description)
        guard case .failure(let escape) = parser.parse(name: "p.json", data: Data(#"{"url": "s3://b/p/", "dest": "../out/"}"#.utf8)) else {
            return XCTFail("a folder outside the root was accepted")
        }
        XCTAssertTrue(escape.description.contains("dest"), escape.description)
    }

    /// A `/` followed by a combining mark is one Character: the checks work on
    /// bytes, as the kernel reads a path, so no `..` hides behind it.
    func testSegmentsAreSplitOnBytesNotCharacters() {
        for key in ["p/../\u{301}x/y", "p/x/..\u{2F}\u{301}/y", "p//\u{301}abs", "p/a/\u{2F}\u{301}"] {
            if case .file(let path) = S3PrefixPlan.placement(key: key, prefix: "p/") {
                XCTFail("\(key.unicodeScalars.map { String($0.value, radix: 16) }) was placed at \(path.debugDescription)")
            }
        }
        XCTAssertEqual(S3PrefixPlan.placement(key: "p/\u{301}x/y", prefix: "p/"), .file("\u{301}x/y"),
                       "a combining mark at a segment's start is only a strange name")
        XCTAssertEqual(PathNormalization.normalize("/r/a/../\u{301}x/y"), "/r/\u{301}x/y")
        for key in ["p/a\u{9B}b", "p/a\u{202E}b", "p/a\u{2066}b"] {
            guard case .refused = S3PrefixPlan.placement(key: key, prefix: "p/") else { return XCTFail("\(key.debugDescription) placed") }
        }
        guard case .refused = S3PrefixPlan.placement(key: "p/" + String(repeating: "n", count: PartialNames.longestName + 1), prefix: "p/") else {
            return XCTFail("a last segment with no room for its checkpoint's names was placed")
        }
    }

    func testADocumentTypeNeverReachesXMLParser() {
        XCTAssertNil(S3XMLElement.parse(#"<!DOCTYPE r [<!ENTITY e "&#60;?x?&#62;">]><r>&e;</r>"#))
        XCTAssertNil(S3XMLElement.parse("<?xml version=\"1.0\"?>\n<!DOCTYPE r><r/>"))
    }
}
