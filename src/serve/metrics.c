/* Counters of the server and their Prometheus text exposition (version 0.0.4). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/server.h"

static const char *const ENDPOINT_NAMES[SERVE_N_ENDPOINTS] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "other"};
/* Upper bounds of the time-to-first-token buckets, seconds (the last is +Inf). */
static const double TTFT_BOUNDS[SERVE_N_TTFT_BUCKETS - 1] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

const char *serve_endpoint_name(serve_endpoint endpoint) {
    return (unsigned)endpoint < SERVE_N_ENDPOINTS ? ENDPOINT_NAMES[endpoint] : "other";
}

void serve_metrics_init(serve_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void serve_metrics_destroy(serve_metrics *m) { pthread_mutex_destroy(&m->mu); }

void serve_metrics_request(serve_metrics *m, serve_endpoint endpoint, int http_status) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SERVE_N_STATUS; i++) {
        if (m->status_codes[endpoint][i] == http_status || m->status_codes[endpoint][i] == 0) {
            m->status_codes[endpoint][i] = http_status;
            m->status_counts[endpoint][i]++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_ttft(serve_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SERVE_N_TTFT_BUCKETS; i++)
        if (i == SERVE_N_TTFT_BUCKETS - 1 || seconds <= TTFT_BOUNDS[i]) m->ttft_buckets[i]++;
    m->ttft_sum += seconds;
    m->ttft_count++;
    pthread_mutex_unlock(&m->mu);
}

static void family(serve_buf *b, const char *name, const char *type, const char *help) {
    serve_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *serve_metrics_text(serve_metrics *m, int32_t queue_depth, int32_t busy_slots, int32_t n_slots) {
    serve_buf b = {0};
    pthread_mutex_lock(&m->mu);
    family(&b, "kite_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
    for (int e = 0; e < SERVE_N_ENDPOINTS; e++)
        for (int i = 0; i < SERVE_N_STATUS && m->status_codes[e][i]; i++)
            serve_buf_printf(&b, "kite_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", ENDPOINT_NAMES[e],
                m->status_codes[e][i], (unsigned long long)m->status_counts[e][i]);
    family(&b, "kite_prompt_tokens_total", "counter", "Prompt tokens of admitted requests (prefix-cache hits included).");
    serve_buf_printf(&b, "kite_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    family(&b, "kite_prefilled_tokens_total", "counter", "Prompt tokens the model ran (prefix-cache hits excluded).");
    serve_buf_printf(&b, "kite_prefilled_tokens_total %llu\n", (unsigned long long)m->prefilled_tokens);
    family(&b, "kite_generated_tokens_total", "counter", "Tokens generated.");
    serve_buf_printf(&b, "kite_generated_tokens_total %llu\n", (unsigned long long)m->generated_tokens);
    family(&b, "kite_queue_depth", "gauge", "Requests waiting for a slot.");
    serve_buf_printf(&b, "kite_queue_depth %d\n", queue_depth);
    family(&b, "kite_slots_busy", "gauge", "Slots (sessions) serving a request.");
    serve_buf_printf(&b, "kite_slots_busy %d\n", busy_slots);
    family(&b, "kite_slots_total", "gauge", "Slots (sessions): requests decoded together.");
    serve_buf_printf(&b, "kite_slots_total %d\n", n_slots);
    family(&b, "kite_prefill_tokens_per_second", "gauge",
           "Prompt tokens run per second of the batch steps that prefilled (since start).");
    serve_buf_printf(&b, "kite_prefill_tokens_per_second %.3f\n",
        m->prefill_seconds > 0 ? (double)m->prefilled_tokens / m->prefill_seconds : 0.0);
    family(&b, "kite_decode_tokens_per_second", "gauge",
           "Tokens generated per second of the batch steps that only decoded, all slots together (since start).");
    serve_buf_printf(&b, "kite_decode_tokens_per_second %.3f\n",
        m->decode_seconds > 0 ? (double)m->decode_only_tokens / m->decode_seconds : 0.0);
    family(&b, "kite_time_to_first_token_seconds", "histogram",
           "From a request's arrival (body received) to its first generated token.");
    for (int i = 0; i < SERVE_N_TTFT_BUCKETS; i++) {
        if (i < SERVE_N_TTFT_BUCKETS - 1)
            serve_buf_printf(&b, "kite_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", TTFT_BOUNDS[i],
                (unsigned long long)m->ttft_buckets[i]);
        else
            serve_buf_printf(&b, "kite_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)m->ttft_buckets[i]);
    }
    serve_buf_printf(&b, "kite_time_to_first_token_seconds_sum %.6f\n", m->ttft_sum);
    serve_buf_printf(&b, "kite_time_to_first_token_seconds_count %llu\n", (unsigned long long)m->ttft_count);
    family(&b, "kite_prefix_cache_hits_total", "counter", "Requests that started from cached K/V of a shared prompt prefix.");
    serve_buf_printf(&b, "kite_prefix_cache_hits_total %llu\n", (unsigned long long)m->prefix_hits);
    family(&b, "kite_spec_drafted_tokens_total", "counter", "Drafted tokens verified by speculative decoding.");
    serve_buf_printf(&b, "kite_spec_drafted_tokens_total %llu\n", (unsigned long long)m->spec_drafted);
    family(&b, "kite_spec_accepted_tokens_total", "counter", "Drafted tokens the target accepted.");
    serve_buf_printf(&b, "kite_spec_accepted_tokens_total %llu\n", (unsigned long long)m->spec_accepted);
    family(&b, "kite_prefix_cache_reused_tokens_total", "counter", "Prompt tokens taken from cached K/V instead of prefilled.");
    serve_buf_printf(&b, "kite_prefix_cache_reused_tokens_total %llu\n", (unsigned long long)m->prefix_reused_tokens);
    family(&b, "kite_prefix_cache_copies_total", "counter", "Prefix-cache hits whose K/V was copied from another slot.");
    serve_buf_printf(&b, "kite_prefix_cache_copies_total %llu\n", (unsigned long long)m->prefix_copies);
    family(&b, "kite_batch_steps_total", "counter", "Forward passes (kite_batch_step) run.");
    serve_buf_printf(&b, "kite_batch_steps_total %llu\n", (unsigned long long)m->batch_steps);
    family(&b, "kite_batch_slot_steps_total", "counter",
           "Busy slots summed over the passes: divided by kite_batch_steps_total, the requests each pass served.");
    serve_buf_printf(&b, "kite_batch_slot_steps_total %llu\n", (unsigned long long)m->batch_slot_steps);
    pthread_mutex_unlock(&m->mu);
    if (!b.data) serve_buf_append(&b, "", 0);
    return b.data;
}
