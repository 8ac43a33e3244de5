import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The session delegate: routes each task's callbacks to its exchange.
final class URLSessionRouter: NSObject, URLSessionDataDelegate, @unchecked Sendable {
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
        if exchange.redirects > exchange.request.maxRedirects {
            // Not followed: the 3xx becomes the final response, which the exchange refuses.
            exchange.redirectLimitExceeded = true
            completionHandler(nil)
        } else {
            completionHandler(request)
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
