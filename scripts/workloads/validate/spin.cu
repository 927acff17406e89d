// A closed-source stand-in: plain CUDA C++, built with nvcc on the GPU machine.
// 200 launches of a spin kernel of known length, copies both ways, one memset.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void spin(long long cycles, int *out) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    if (threadIdx.x == 0) out[blockIdx.x] = 1;
}

int main() {
    int *d = nullptr;
    cudaMalloc(&d, 1024 * sizeof(int));
    static int h[1024];
    cudaMemset(d, 0, 1024 * sizeof(int));
    for (int i = 0; i < 200; i++) spin<<<8, 128>>>(20000, d);
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    printf("{\"workload\": \"cuda_cpp\", \"launches\": 200, \"h0\": %d}\n", h[0]);
    cudaFree(d);
    return 0;
}
