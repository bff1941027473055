/* The Kubernetes 1.32 OpenAPI v2 document (specs/k8s/swagger-v1.32.json,
 * see specs/k8s/sources.json) linked into the simulator as read-only
 * bytes: the schemas of the built-in kinds (k8s_schema.c). The build
 * passes the file's path as KB_K8S_SWAGGER. */
        .section .rodata
        .balign 16
        .globl  kb_k8s_swagger_json
        .type   kb_k8s_swagger_json, @object
kb_k8s_swagger_json:
        .incbin KB_K8S_SWAGGER
        .globl  kb_k8s_swagger_json_end
kb_k8s_swagger_json_end:
        .byte   0
        .section .note.GNU-stack,"",@progbits
