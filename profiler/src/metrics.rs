//! `record --metrics ADDR`: an HTTP server (hyper on a tokio runtime of its own thread)
//! that serves the latest Prometheus text on `GET /metrics`. The recording refreshes
//! the text (rendered by export/formats/prometheus.rs, or by `agent` in always-on mode); this
//! thread only serves it.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    thread::JoinHandle,
};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::{
    body::{Bytes, Incoming},
    header::{HeaderValue, CONTENT_TYPE},
    Method, Request, Response, StatusCode,
};
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;

/// The Prometheus text exposition format's content type.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

pub struct MetricsServer {
    pub addr: SocketAddr,
    body: Arc<Mutex<Bytes>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` now (a busy port fails here, before anything is loaded) and serves
    /// `initial` until the first update.
    pub fn start(addr: SocketAddr, initial: String) -> Result<Self> {
        let listener = std::net::TcpListener::bind(addr).with_context(|| {
            format!(
                "cannot serve metrics on {addr}: choose a free port with --metrics 127.0.0.1:PORT"
            )
        })?;
        let addr = listener.local_addr().unwrap_or(addr);
        listener
            .set_nonblocking(true)
            .context("cannot make the metrics socket non-blocking")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .context("cannot start the metrics runtime")?;
        let body = Arc::new(Mutex::new(Bytes::from(initial)));
        let (stop, stopped) = oneshot::channel();
        let thread = {
            let body = body.clone();
            std::thread::Builder::new()
                .name("lockpath-metrics".into())
                .spawn(move || runtime.block_on(serve(listener, body, stopped)))
                .context("cannot start the metrics thread")?
        };
        Ok(MetricsServer {
            addr,
            body,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn update(&self, text: String) {
        if let Ok(mut body) = self.body.lock() {
            *body = Bytes::from(text);
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections until told to stop; each connection is served by its own task
/// (a slow or misbehaving client only delays its own answer).
async fn serve(
    listener: std::net::TcpListener,
    body: Arc<Mutex<Bytes>>,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(err) => {
            log::warn!("metrics: cannot use the listening socket: {err}");
            return;
        }
    };
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    log::warn!("metrics: accept failed: {err}");
                    continue;
                }
            },
        };
        let body = body.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let body = body.clone();
                async move { Ok::<_, Infallible>(answer(&request, &body)) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(err) = connection.await {
                log::debug!("metrics: connection ended: {err}");
            }
        });
    }
}

/// `GET /metrics` (or HEAD): the latest text; `/`: where the metrics are; else 404.
fn answer(request: &Request<Incoming>, metrics: &Mutex<Bytes>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => (
            StatusCode::OK,
            EXPOSITION,
            metrics.lock().map(|body| body.clone()).unwrap_or_default(),
        ),
        (&Method::GET | &Method::HEAD, "/") => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"lockpath: metrics at /metrics\n"),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"not found: try /metrics\n"),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("send");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("read");
        text
    }

    #[test]
    fn serves_the_latest_text() {
        let server = MetricsServer::start("127.0.0.1:0".parse().expect("addr"), "a 1\n".into())
            .expect("start");
        assert!(get(server.addr, "/metrics").ends_with("\r\n\r\na 1\n"));
        server.update("a 2\n".into());
        let reply = get(server.addr, "/metrics");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("version=0.0.4"));
        assert!(reply.ends_with("a 2\n"), "{reply}");
        assert!(get(server.addr, "/nope").starts_with("HTTP/1.1 404"));
        // HTTP/1.0 clients (curl -0, old scrapers) are answered too.
        let mut stream = std::net::TcpStream::connect(server.addr).expect("connect");
        write!(stream, "GET /metrics HTTP/1.0\r\n\r\n").expect("send");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("read");
        assert!(text.ends_with("a 2\n"), "{text}");
    }

    #[test]
    fn a_busy_port_is_one_clear_error() {
        let first = MetricsServer::start("127.0.0.1:0".parse().expect("addr"), String::new())
            .expect("start");
        let err = MetricsServer::start(first.addr, String::new())
            .err()
            .expect("second bind fails");
        assert!(format!("{err:#}").contains("choose a free port"), "{err:#}");
    }
}
