import Foundation
@testable import TransferCore
import XCTest

/// S3 answers as real servers write them, read by `S3XMLElement`.
final class S3XMLTests: XCTestCase {
    func testGoStyleCharacterReferencesInETags() throws {
        // SeaweedFS (Go's encoding/xml) writes quotes as &#34;.
        let body = """
            <?xml version="1.0" encoding="UTF-8"?>
            <CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Location>http://h/b/k</Location>\
            <Bucket>b</Bucket><Key>k</Key><ETag>&#34;3858f62230ac3c915f300c664312c11f-2&#34;</ETag></CompleteMultipartUploadResult>
            """
        let root = try XCTUnwrap(S3XMLElement.parse(body))
        XCTAssertEqual(root.name, "CompleteMultipartUploadResult")
        XCTAssertEqual(root.value("ETag"), "\"3858f62230ac3c915f300c664312c11f-2\"")
    }

    func testALineBreakBeforeTheDeclaration() throws {
        // moto's templates start with a line break.
        let root = try XCTUnwrap(S3XMLElement.parse("\n<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult><UploadId>abc</UploadId></InitiateMultipartUploadResult>"))
        XCTAssertEqual(root.value("UploadId"), "abc")
    }

    func testPrefixesCDATAWhitespaceAndAttributes() throws {
        let body = """
            <s3:ListPartsResult xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/">
              <s3:IsTruncated> true </s3:IsTruncated>
              <s3:NextPartNumberMarker>2</s3:NextPartNumberMarker>
              <s3:Part><s3:PartNumber>1</s3:PartNumber><s3:ETag><![CDATA["aaa"]]></s3:ETag><s3:Size>5242880</s3:Size></s3:Part>
              <s3:Part kind="x">
                <s3:PartNumber>2</s3:PartNumber>
                <s3:ETag>&quot;bbb&quot;</s3:ETag>
                <s3:Size>1</s3:Size>
              </s3:Part>
            </s3:ListPartsResult>
            """
        let root = try XCTUnwrap(S3XMLElement.parse(body))
        XCTAssertEqual(root.name, "ListPartsResult")
        XCTAssertEqual(root.value("IsTruncated"), "true")
        let parts = root.children("Part")
        XCTAssertEqual(parts.map { $0.value("PartNumber") }, ["1", "2"])
        XCTAssertEqual(parts.map { $0.value("ETag") }, ["\"aaa\"", "\"bbb\""])
        XCTAssertEqual(parts.map { $0.value("Size") }, ["5242880", "1"])
    }

    func testByteSearchTrimAndUnquote() {
        let data = Data("ab<?x?>cd<?".utf8)
        XCTAssertEqual(S3XMLElement.find(Array("<?".utf8), in: data[...]), 2)
        XCTAssertEqual(S3XMLElement.find(Array("<?".utf8), in: data[3...]), 9, "indices are the data's own")
        XCTAssertNil(S3XMLElement.find(Array("<!DOCTYPE".utf8), in: data[...]))
        XCTAssertNil(S3XMLElement.find(Array("cd<?x".utf8), in: data[7...]), "a needle running past the end is not found")
        XCTAssertNil(S3XMLElement.find(Array("x".utf8), in: Data()[...]))
        let tail = Data("0123456789".utf8)[4...]
        XCTAssertEqual(S3XMLElement.find(Array("89".utf8), in: tail), 8)
        XCTAssertEqual(S3XMLElement.find(Array("45".utf8), in: tail), 4)
        for (text, trimmed) in [(" \n\t x y \r\n", "x y"), ("x", "x"), ("", ""), ("  ", ""), ("\u{A0}x\u{A0}", "\u{A0}x\u{A0}")] {
            XCTAssertEqual(S3XMLElement.trimmed(text), trimmed, text)
        }
        for (text, bare) in [("\"abc\"", "abc"), ("abc", "abc"), ("\"\"", ""), ("\"\"a-1\"\"", "a-1"), ("", "")] {
            XCTAssertEqual(S3ListPage.unquoted(text), bare, text)
        }
    }

    func testErrorDocumentsAndNonXML() {
        let error = S3ErrorDocument("<Error><Code>SlowDown</Code><Message>Reduce your request rate &amp; retry.</Message></Error>")
        XCTAssertEqual(error, S3ErrorDocument("<?xml version=\"1.0\"?>\n<Error>\n<Code>SlowDown</Code><Message>Reduce your request rate &amp; retry.</Message>\n</Error>"))
        XCTAssertEqual(error?.code, "SlowDown")
        XCTAssertEqual(error?.message, "Reduce your request rate & retry.")
        XCTAssertNil(S3ErrorDocument("<html><title>502 Bad Gateway</title></html>"))
        XCTAssertNil(S3XMLElement.parse("not xml at all"))
        XCTAssertNil(S3XMLElement.parse("<a><b></a>"))
        // No external entity is ever read.
        let external = S3XMLElement.parse("<!DOCTYPE x [<!ENTITY e SYSTEM \"file:///etc/hostname\">]><x>&e;</x>")
        XCTAssertTrue(external == nil || external!.text.isEmpty, "an external entity was read: \(String(describing: external))")
    }

    func testOpenUploadsPagesAreReadWithTheirMarkers() throws {
        let page = try S3OpenUploadsPage.parse("""
            <?xml version="1.0" encoding="UTF-8"?>
            <ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
              <Bucket>b</Bucket><IsTruncated>true</IsTruncated>
              <NextKeyMarker>a&#38;b</NextKeyMarker><NextUploadIdMarker>u2</NextUploadIdMarker>
              <Upload><Key>a&amp;b</Key><UploadId>u1</UploadId></Upload>
              <Upload><Key>a&amp;b</Key><UploadId> u2 </UploadId></Upload>
              <Upload><Key>no-id</Key></Upload>
            </ListMultipartUploadsResult>
            """)
        XCTAssertEqual(page.uploads.map(\.key), ["a&b", "a&b"])
        XCTAssertEqual(page.uploads.map(\.uploadID), ["u1", "u2"])
        XCTAssertEqual(page.next?.keyMarker, "a&b")
        XCTAssertEqual(page.next?.uploadIDMarker, "u2")
        XCTAssertThrowsError(try S3OpenUploadsPage.parse("<ListMultipartUploadsResult><IsTruncated>true</IsTruncated></ListMultipartUploadsResult>"))
        XCTAssertThrowsError(try S3OpenUploadsPage.parse("<Error><Code>AccessDenied</Code></Error>"))
    }
}
