import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The session delegate: routes each task's callbacks to its exchange.
// URLSession calls the delegate on its serial queue; the exchange table is a `Locked` map.
final class URLSessionRouter: NSObject, URLSessionDataDelegate, Sendable {
    private let exchanges = Locked<[Int: URLSessionExchange]>([:])

    func register(_ exchange: URLSessionExchange) {
        exchanges.withLock { $0[exchange.task.taskIdentifier] = exchange }
    }

    private func exchange(for task: URLSessionTask) -> URLSessionExchange? {
        exchanges.withLock { $0[task.taskIdentifier] }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        guard let exchange = exchange(for: dataTask) else { return completionHandler(.cancel) }
        completionHandler(exchange.receive(response: response) ? .allow : .cancel)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let exchange = exchange(for: dataTask) else { return }
        exchange.receive(data: data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        guard let exchange = exchange(for: task) else { return completionHandler(nil) }
        exchange.redirects += 1
        let location = response.value(forHTTPHeaderField: "Location") ?? request.url?.absoluteString ?? ""
        switch RedirectPolicy.next(after: exchange.current, original: exchange.request, status: response.statusCode,
                                   location: location, hops: exchange.redirects) {
        case .success(let next) where next.body != .none:
            // A 307 or 308 after a request with a body: FoundationNetworking would send the
            // next request without it (and with the old Content-Length).
            exchange.refusedRedirect = TransportError(.unsupported, url: exchange.request.url, message:
                "the server answered \(response.statusCode), asking for the request body to be sent again elsewhere; "
                + "the urlsession backend cannot repeat a body across a redirect — use --transport curl")
            completionHandler(nil)
        case .success(let next):
            exchange.current = next
            // URLSession carries every header of the first request over: send the policy's instead.
            var followed = request
            followed.url = next.url
            followed.httpMethod = next.method
            if exchange.request.body != .none {
                // Continued as a GET without the body: nothing of it may remain.
                followed.httpBody = nil
                followed.setValue(nil, forHTTPHeaderField: "Content-Length")
            }
            for field in exchange.request.headers where !next.headers.contains(field.name) {
                followed.setValue(nil, forHTTPHeaderField: field.name)
            }
            completionHandler(followed)
        case .failure(let error):
            if error.kind == .tooManyRedirects {
                // Not followed: the 3xx becomes the final response, which the exchange refuses.
                exchange.redirectLimitExceeded = true
                completionHandler(nil)
            } else {
                // Not followed: the 3xx becomes the final response, which the exchange refuses with this
                // error (cancelling here, inside the callback, would trap in FoundationNetworking).
                exchange.refusedRedirect = error
                completionHandler(nil)
            }
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64,
                    totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        exchange(for: task)?.request.onProgress?(totalBytesSent, 0)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        guard let exchange = exchanges.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        exchange.complete(error: error)
    }
}
