/* A minimal NVTX tool (injection library): it makes NVTX domains enabled, as nsys does, and writes
 * one line per domain/range call to the file named by NVTX_RECORDER_LOG (nothing when unset).
 * Load it with NVTX_INJECTION64_PATH=/path/to/libnvtx_recorder.so. Self-contained: no NVTX headers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/syscall.h>

typedef void (*fn_t)(void);
typedef fn_t **fn_table_t;
typedef struct { size_t size; int (*get_module)(int module, fn_table_t *table, unsigned *count); } callbacks_t;
typedef const void *(*get_export_table_t)(uint32_t id);
typedef struct { const char *name; } named_t;  /* a domain or a registered string: its text */
typedef struct {
    uint16_t version, size; uint32_t category; int32_t color_type; uint32_t color;
    int32_t payload_type, reserved; union { uint64_t u; int64_t i; double d; } payload;
    int32_t message_type; union { const char *ascii; const void *handle; } message;
} attributes_t;

enum { MODULE_CORE2 = 5, RANGE_START = 2, RANGE_END = 3, PUSH = 4, POP = 5, NAME_CATEGORY = 8,
       REGISTER_STRING = 10, DOMAIN_CREATE = 12 };

static FILE *log_file;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static named_t *named(const char *text) {
    named_t *item = malloc(sizeof *item);
    item->name = strdup(text ? text : "");
    return item;
}
static const char *domain_name(const void *domain) { return domain ? ((const named_t *)domain)->name : "(default)"; }
static const char *message(const attributes_t *a) {
    if (a->message_type == 1) return a->message.ascii;
    if (a->message_type == 3) return ((const named_t *)a->message.handle)->name;
    return "";
}
static void write_event(const char *what, const void *domain, const attributes_t *a) {
    if (!log_file) return;
    pthread_mutex_lock(&lock);
    if (a)
        fprintf(log_file, "%s\t%ld\t%s\t%s\tcolor=%d:%08x\tcategory=%u\tpayload=%d:%lld\n", what,
                (long)syscall(SYS_gettid), domain_name(domain), message(a), a->color_type, a->color, a->category,
                a->payload_type, (long long)a->payload.i);
    else
        fprintf(log_file, "%s\t%ld\t%s\n", what, (long)syscall(SYS_gettid), domain_name(domain));
    fflush(log_file);
    pthread_mutex_unlock(&lock);
}

static int push(const void *domain, const attributes_t *a) { write_event("push", domain, a); return 0; }
static int pop(const void *domain) { write_event("pop", domain, NULL); return 0; }
static uint64_t range_id;
static uint64_t start(const void *domain, const attributes_t *a) { write_event("start", domain, a); return ++range_id; }
static void end(const void *domain, uint64_t id) { (void)id; write_event("end", domain, NULL); }
static void name_category(const void *domain, uint32_t id, const char *name) {
    if (!log_file) return;
    pthread_mutex_lock(&lock);
    fprintf(log_file, "category\t%s\t%u\t%s\n", domain_name(domain), id, name);
    pthread_mutex_unlock(&lock);
}
static void *register_string(const void *domain, const char *text) { (void)domain; return named(text); }
static void *create_domain(const char *name) { return named(name); }

int InitializeInjectionNvtx2(get_export_table_t get_export_table) {
    const callbacks_t *callbacks = get_export_table(1);
    fn_table_t table = NULL;
    unsigned count = 0;
    if (!callbacks || !callbacks->get_module(MODULE_CORE2, &table, &count)) return 0;
    const char *path = getenv("NVTX_RECORDER_LOG");
    if (path && *path) log_file = fopen(path, "a");
    *table[RANGE_START] = (fn_t)start;
    *table[RANGE_END] = (fn_t)end;
    *table[PUSH] = (fn_t)push;
    *table[POP] = (fn_t)pop;
    *table[NAME_CATEGORY] = (fn_t)name_category;
    *table[REGISTER_STRING] = (fn_t)register_string;
    *table[DOMAIN_CREATE] = (fn_t)create_domain;
    return 1;
}
